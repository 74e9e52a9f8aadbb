#include "tokenizer/spm_proto.h"

#include "engine/error.h"

#include <fmt/format.h>

#include <bit>
#include <cstring>

namespace quill {

namespace {

// Protobuf wire types.
enum Wire : uint32_t { kVarint = 0, kFixed64 = 1, kBytes = 2, kFixed32 = 5 };

// ---- writing ----

void put_varint(std::string& out, uint64_t v) {
    while (v >= 0x80) {
        out.push_back(static_cast<char>((v & 0x7F) | 0x80));
        v >>= 7;
    }
    out.push_back(static_cast<char>(v));
}

void put_tag(std::string& out, uint32_t field, Wire wire) { put_varint(out, (uint64_t{field} << 3) | wire); }

void put_int(std::string& out, uint32_t field, int64_t v) {
    put_tag(out, field, kVarint);
    put_varint(out, static_cast<uint64_t>(v));  // negative int32 values take ten bytes, as protobuf writes them
}

void put_bytes(std::string& out, uint32_t field, std::string_view bytes) {
    put_tag(out, field, kBytes);
    put_varint(out, bytes.size());
    out.append(bytes);
}

void put_float(std::string& out, uint32_t field, float v) {
    put_tag(out, field, kFixed32);
    const auto bits = std::bit_cast<uint32_t>(v);
    for (int i = 0; i < 4; ++i) out.push_back(static_cast<char>((bits >> (8 * i)) & 0xFF));
}

// ---- reading ----

class Reader {
public:
    Reader(std::string_view bytes, const std::string& name) : bytes_(bytes), name_(name) {}

    bool done() const { return pos_ >= bytes_.size(); }

    uint64_t varint() {
        uint64_t v = 0;
        for (int shift = 0; shift < 64; shift += 7) {
            if (pos_ >= bytes_.size()) fail("truncated varint");
            const auto b = static_cast<uint8_t>(bytes_[pos_++]);
            v |= uint64_t{b & 0x7Fu} << shift;
            if (!(b & 0x80)) return v;
        }
        fail("varint longer than ten bytes");
    }

    // Reads a tag; returns the field number and sets `wire`.
    uint32_t tag(Wire& wire) {
        const uint64_t t = varint();
        wire = static_cast<Wire>(t & 7);
        return static_cast<uint32_t>(t >> 3);
    }

    std::string_view bytes() {
        const uint64_t n = varint();
        if (n > bytes_.size() - pos_) fail("length-delimited field runs past the end");
        std::string_view s = bytes_.substr(pos_, n);
        pos_ += n;
        return s;
    }

    float fixed32() {
        if (bytes_.size() - pos_ < 4) fail("truncated fixed32");
        uint32_t bits = 0;
        for (int i = 0; i < 4; ++i) bits |= uint32_t{static_cast<uint8_t>(bytes_[pos_ + i])} << (8 * i);
        pos_ += 4;
        return std::bit_cast<float>(bits);
    }

    void skip(Wire wire) {
        switch (wire) {
            case kVarint: varint(); break;
            case kFixed64:
                if (bytes_.size() - pos_ < 8) fail("truncated fixed64");
                pos_ += 8;
                break;
            case kBytes: bytes(); break;
            case kFixed32: fixed32(); break;
            default: fail(fmt::format("unsupported wire type {}", static_cast<uint32_t>(wire)));
        }
    }

    void expect(Wire wire, Wire expected, uint32_t field) {
        if (wire != expected) fail(fmt::format("field {} has wire type {}, expected {}", field, +wire, +expected));
    }

    [[noreturn]] void fail(const std::string& what) const {
        throw FileError(fmt::format("{}: not a sentencepiece model: {} at byte {}", name_, what, pos_));
    }

    const std::string& name() const { return name_; }

private:
    std::string_view bytes_;
    const std::string& name_;
    size_t pos_ = 0;
};

SpmModel::Piece parse_piece(std::string_view bytes, const std::string& name) {
    Reader r(bytes, name);
    SpmModel::Piece p;
    while (!r.done()) {
        Wire wire;
        const uint32_t field = r.tag(wire);
        if (field == 1) {
            r.expect(wire, kBytes, field);
            p.piece = std::string(r.bytes());
        } else if (field == 2) {
            r.expect(wire, kFixed32, field);
            p.score = r.fixed32();
        } else if (field == 3) {
            r.expect(wire, kVarint, field);
            p.type = static_cast<int32_t>(r.varint());
        } else {
            r.skip(wire);
        }
    }
    return p;
}

void parse_trainer_spec(std::string_view bytes, const std::string& name, SpmModel& m) {
    Reader r(bytes, name);
    while (!r.done()) {
        Wire wire;
        const uint32_t field = r.tag(wire);
        if (wire != kVarint) {
            r.skip(wire);
            continue;
        }
        const auto v = static_cast<int64_t>(r.varint());
        if (field == 3) m.model_type = static_cast<int32_t>(v);
        else if (field == 35) m.byte_fallback = v != 0;
        else if (field == 40) m.unk_id = static_cast<int32_t>(v);
        else if (field == 41) m.bos_id = static_cast<int32_t>(v);
        else if (field == 42) m.eos_id = static_cast<int32_t>(v);
    }
}

void parse_normalizer_spec(std::string_view bytes, const std::string& name, SpmModel& m) {
    Reader r(bytes, name);
    while (!r.done()) {
        Wire wire;
        const uint32_t field = r.tag(wire);
        if (field == 1 && wire == kBytes) {
            m.normalizer_name = std::string(r.bytes());
        } else if (wire == kVarint && field >= 3 && field <= 5) {
            const bool v = r.varint() != 0;
            if (field == 3) m.add_dummy_prefix = v;
            else if (field == 4) m.remove_extra_whitespaces = v;
            else m.escape_whitespaces = v;
        } else {
            r.skip(wire);
        }
    }
}

}  // namespace

SpmModel parse_spm_model(std::string_view bytes, const std::string& name) {
    SpmModel m;
    Reader r(bytes, name);
    while (!r.done()) {
        Wire wire;
        const uint32_t field = r.tag(wire);
        if (field >= 1 && field <= 3) {
            r.expect(wire, kBytes, field);
            const std::string_view sub = r.bytes();
            if (field == 1) m.pieces.push_back(parse_piece(sub, name));
            else if (field == 2) parse_trainer_spec(sub, name, m);
            else parse_normalizer_spec(sub, name, m);
        } else {
            r.skip(wire);
        }
    }
    if (m.pieces.empty()) r.fail("no pieces");
    return m;
}

std::string serialize_spm_model(const SpmModel& model) {
    std::string out;
    std::string sub;
    for (const SpmModel::Piece& p : model.pieces) {
        sub.clear();
        put_bytes(sub, 1, p.piece);
        put_float(sub, 2, p.score);
        put_int(sub, 3, p.type);
        put_bytes(out, 1, sub);
    }

    sub.clear();
    put_int(sub, 3, model.model_type);
    put_int(sub, 4, static_cast<int64_t>(model.pieces.size()));
    put_int(sub, 35, model.byte_fallback);
    put_int(sub, 40, model.unk_id);
    put_int(sub, 41, model.bos_id);
    put_int(sub, 42, model.eos_id);
    put_bytes(out, 2, sub);

    sub.clear();
    put_bytes(sub, 1, model.normalizer_name);
    put_int(sub, 3, model.add_dummy_prefix);
    put_int(sub, 4, model.remove_extra_whitespaces);
    put_int(sub, 5, model.escape_whitespaces);
    put_bytes(out, 3, sub);
    return out;
}

}  // namespace quill
