#include "engine/format/gguf.h"

#include "engine/error.h"
#include "engine/io/input.h"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

namespace quill {

namespace {

constexpr uint32_t kMagic = 0x46554747;  // "GGUF" read as a little-endian u32
constexpr int kMaxArrayDepth = 4;        // arrays of arrays nest at most this deep
constexpr uint64_t kDefaultAlignment = 32;

// The fewest bytes a value of each type can occupy in a file; bounds every count read from it.
size_t min_value_size(GgufType t) {
    switch (t) {
        case GgufType::U8: case GgufType::I8: case GgufType::BOOL: return 1;
        case GgufType::U16: case GgufType::I16: return 2;
        case GgufType::U32: case GgufType::I32: case GgufType::F32: return 4;
        case GgufType::U64: case GgufType::I64: case GgufType::F64: return 8;
        case GgufType::STRING: return 8;  // the length
        case GgufType::ARRAY: return 12;  // element type + count
    }
    return 1;
}

bool valid_value_type(uint32_t t) { return t <= static_cast<uint32_t>(GgufType::F64); }

// Bounds-checked little-endian reader over the file image. Every read names what it reads so that a defect
// message says where the file went wrong.
class Cursor {
public:
    // `owner` keeps the bytes alive (arrays share them).
    Cursor(std::span<const uint8_t> bytes, const std::string& path, const std::shared_ptr<const void>& owner)
        : bytes_(bytes), path_(path), owner_(owner) {}

    size_t pos() const { return pos_; }
    std::span<const uint8_t> bytes() const { return bytes_; }
    const std::shared_ptr<const void>& owner() const { return owner_; }
    size_t remaining() const { return bytes_.size() - pos_; }

    [[noreturn]] void fail(const std::string& defect) const { throw FileError(fmt::format("{}: {}", path_, defect)); }

    void need(uint64_t n, std::string_view what) const {
        if (n > remaining())
            fail(fmt::format("truncated: {} needs {} bytes at offset {} but the file ends at {}", what, n, pos_,
                             bytes_.size()));
    }

    template <class T>
    T read(std::string_view what) {
        need(sizeof(T), what);
        T v;
        std::memcpy(&v, bytes_.data() + pos_, sizeof(T));
        pos_ += sizeof(T);
        return v;
    }

    std::string read_string(std::string_view what) {
        uint64_t len = read<uint64_t>(what);
        need(len, what);
        std::string s(reinterpret_cast<const char*>(bytes_.data() + pos_), len);
        pos_ += len;
        return s;
    }

    // A string value of metadata key `key`, whose name is formatted only for a defect (a vocabulary's tokens and
    // merges are 100K strings, and formatting the name for each was a visible share of loading them).
    std::string read_key_string(const std::string& key) {
        uint64_t len = 0;
        if (remaining() >= sizeof len) std::memcpy(&len, bytes_.data() + pos_, sizeof len);
        if (remaining() < sizeof len || len > remaining() - sizeof len)
            return read_string(fmt::format("key '{}': string", key));  // (fails, naming the key)
        return read_string("string");
    }

    // Moves past n bytes, which `what` needs.
    void skip(uint64_t n, std::string_view what) {
        need(n, what);
        pos_ += n;
    }

    // Moves past a string value of metadata key `key`, checking its length as read_key_string does.
    void skip_key_string(const std::string& key) {
        uint64_t len = 0;
        if (remaining() >= sizeof len) std::memcpy(&len, bytes_.data() + pos_, sizeof len);
        if (remaining() < sizeof len || len > remaining() - sizeof len)
            read_string(fmt::format("key '{}': string", key));  // (fails, naming the key)
        pos_ += sizeof len + len;
    }

    // A count of items that each occupy at least `min_size` bytes: rejected before anything is sized by it.
    uint64_t read_count(size_t min_size, std::string_view what) {
        uint64_t n = read<uint64_t>(what);
        if (n > remaining() / min_size)
            fail(fmt::format("{} is {}, more than the {} bytes left in the file can hold", what, n, remaining()));
        return n;
    }

private:
    std::span<const uint8_t> bytes_;
    const std::string& path_;
    const std::shared_ptr<const void>& owner_;
    size_t pos_ = 0;
};

void skip_value(Cursor& c, GgufType type, int depth, const std::string& key);

// Checks the n elements of `type` at the cursor and moves past them, allocating nothing: an array is kept as the
// file's bytes (GgufArray), so its checks must not cost memory per element.
void skip_elements(Cursor& c, GgufType type, uint64_t n, int depth, const std::string& key) {
    switch (type) {
        case GgufType::STRING:
            for (uint64_t i = 0; i < n; ++i) c.skip_key_string(key);
            return;
        case GgufType::ARRAY:
            for (uint64_t i = 0; i < n; ++i) skip_value(c, type, depth + 1, key);
            return;
        case GgufType::BOOL:
            for (uint64_t i = 0; i < n; ++i) {
                const uint8_t b = c.read<uint8_t>("bool value");
                if (b > 1) c.fail(fmt::format("key '{}': bool value {} is neither 0 nor 1", key, b));
            }
            return;
        default:  // n was checked against the bytes left (read_count), so the product does not overflow
            c.skip(n * min_value_size(type), fmt::format("key '{}': array", key));
    }
}

// An array's element type and count at the cursor; checks and skips its elements. Returns where they begin.
size_t skip_array(Cursor& c, int depth, const std::string& key, GgufType* type, uint64_t* n) {
    if (depth >= kMaxArrayDepth) c.fail(fmt::format("key '{}': arrays nested deeper than {}", key, kMaxArrayDepth));
    uint32_t et = c.read<uint32_t>("array element type");
    if (!valid_value_type(et)) c.fail(fmt::format("key '{}': unknown array element type {}", key, et));
    *type = static_cast<GgufType>(et);
    *n = c.read_count(min_value_size(*type), fmt::format("key '{}': array length", key));
    const size_t start = c.pos();
    skip_elements(c, *type, *n, depth, key);
    return start;
}

void skip_value(Cursor& c, GgufType type, int depth, const std::string& key) {
    GgufType et;
    uint64_t n;
    if (type == GgufType::ARRAY) skip_array(c, depth, key, &et, &n);
    else skip_elements(c, type, 1, depth, key);
}

GgufArray read_array(Cursor& c, int depth, const std::string& key) {
    GgufType type;
    uint64_t n;
    const size_t start = skip_array(c, depth, key, &type, &n);
    return GgufArray::from_encoded(type, n, c.bytes().subspan(start, c.pos() - start), c.owner());
}

GgufValue read_value(Cursor& c, GgufType type, int depth, const std::string& key) {
    switch (type) {
        case GgufType::U8: return c.read<uint8_t>("u8 value");
        case GgufType::I8: return c.read<int8_t>("i8 value");
        case GgufType::U16: return c.read<uint16_t>("u16 value");
        case GgufType::I16: return c.read<int16_t>("i16 value");
        case GgufType::U32: return c.read<uint32_t>("u32 value");
        case GgufType::I32: return c.read<int32_t>("i32 value");
        case GgufType::F32: return c.read<float>("f32 value");
        case GgufType::U64: return c.read<uint64_t>("u64 value");
        case GgufType::I64: return c.read<int64_t>("i64 value");
        case GgufType::F64: return c.read<double>("f64 value");
        case GgufType::BOOL: {
            uint8_t b = c.read<uint8_t>("bool value");
            if (b > 1) c.fail(fmt::format("key '{}': bool value {} is neither 0 nor 1", key, b));
            return b != 0;
        }
        case GgufType::STRING: return c.read_key_string(key);
        case GgufType::ARRAY: return read_array(c, depth, key);
    }
    c.fail(fmt::format("key '{}': unknown value type {}", key, static_cast<uint32_t>(type)));
}

uint64_t align_up(uint64_t x, uint64_t a) { return (x + a - 1) / a * a; }

// ---- encoding: the writer's, and arrays built in memory ----

template <class Sink>
void put_raw(Sink& sink, const void* p, size_t n) {
    sink(static_cast<const uint8_t*>(p), n);
}

template <class T, class Sink>
void put(Sink& sink, T x) {
    put_raw(sink, &x, sizeof x);
}

template <class Sink>
void put_string(Sink& sink, const std::string& s) {
    put<uint64_t>(sink, s.size());
    put_raw(sink, s.data(), s.size());
}

template <class Sink>
void put_value(Sink& sink, const GgufValue& v) {
    std::visit(
        [&](const auto& x) {
            using T = std::decay_t<decltype(x)>;
            if constexpr (std::is_same_v<T, std::string>) {
                put_string(sink, x);
            } else if constexpr (std::is_same_v<T, GgufArray>) {
                put<uint32_t>(sink, static_cast<uint32_t>(x.type()));
                put<uint64_t>(sink, x.size());
                put_raw(sink, x.encoded().data(), x.encoded().size());
            } else if constexpr (std::is_same_v<T, bool>) {
                put<uint8_t>(sink, x ? 1 : 0);
            } else {
                put<T>(sink, x);
            }
        },
        v.v);
}

// ---- arrays kept in their encoding ----

constexpr size_t kIndexStride = 16;  // GgufArray::index_ holds the offset of every 16th variable-size element

template <class T>
T load(std::span<const uint8_t> bytes, size_t pos) {
    QUILL_CHECK(pos <= bytes.size() && sizeof(T) <= bytes.size() - pos, "array element at {} runs past {} bytes",
                pos, bytes.size());
    T v;
    std::memcpy(&v, bytes.data() + pos, sizeof v);
    return v;
}

// The bytes one element of a fixed-size type takes; 0 for strings and arrays.
size_t fixed_size(GgufType t) { return t == GgufType::STRING || t == GgufType::ARRAY ? 0 : min_value_size(t); }

size_t element_size(GgufType type, std::span<const uint8_t> bytes, size_t pos, int depth);

// The bytes of n elements of `type` encoded from pos.
size_t elements_size(GgufType type, uint64_t n, std::span<const uint8_t> bytes, size_t pos, int depth) {
    if (const size_t size = fixed_size(type)) {
        QUILL_CHECK(pos <= bytes.size() && n <= (bytes.size() - pos) / size, "{} array elements run past {} bytes",
                    n, bytes.size());
        return n * size;
    }
    size_t at = pos;
    for (uint64_t i = 0; i < n; ++i) at += element_size(type, bytes, at, depth);
    return at - pos;
}

// The bytes of the element of `type` encoded at pos; `depth` counts the arrays around it.
size_t element_size(GgufType type, std::span<const uint8_t> bytes, size_t pos, int depth) {
    if (const size_t size = fixed_size(type)) return elements_size(type, 1, bytes, pos, depth);
    if (type == GgufType::STRING) {
        const auto len = load<uint64_t>(bytes, pos);
        QUILL_CHECK(len <= bytes.size() - pos - 8, "a string of {} bytes at {} runs past {} bytes", len, pos,
                    bytes.size());
        return 8 + len;
    }
    QUILL_CHECK(depth < kMaxArrayDepth, "arrays nested deeper than {}", kMaxArrayDepth);
    const auto et = load<uint32_t>(bytes, pos);
    QUILL_CHECK(valid_value_type(et), "unknown array element type {}", et);
    const auto n = load<uint64_t>(bytes, pos + 4);
    return 12 + elements_size(static_cast<GgufType>(et), n, bytes, pos + 12, depth + 1);
}

// Owns an mmap'ed file.
struct Mapping {
    void* addr = nullptr;
    size_t size = 0;
    ~Mapping() {
        if (addr) munmap(addr, size);
    }
};

}  // namespace

// ---------------------------------------------------------------------------------------------------------------
// GgufValue

std::string_view gguf_type_name(GgufType type) {
    static constexpr std::string_view names[] = {"u8",     "i8",   "u16",    "i16",   "u32", "i32", "f32",
                                                  "bool",   "string", "array", "u64", "i64", "f64"};
    auto i = static_cast<size_t>(type);
    return i < std::size(names) ? names[i] : "unknown";
}

GgufArray::GgufArray(GgufType type, const std::vector<GgufValue>& items) {
    auto buffer = std::make_shared<std::vector<uint8_t>>();
    auto sink = [&](const uint8_t* p, size_t n) { buffer->insert(buffer->end(), p, p + n); };
    for (const auto& it : items) {
        QUILL_CHECK(it.type() == type, "array item of type {} in an array of {}", gguf_type_name(it.type()),
                    gguf_type_name(type));
        put_value(sink, it);
    }
    const std::span<const uint8_t> bytes(*buffer);
    *this = from_encoded(type, items.size(), bytes, std::move(buffer));
}

GgufArray GgufArray::from_encoded(GgufType type, uint64_t n, std::span<const uint8_t> bytes,
                                  std::shared_ptr<const void> owner) {
    QUILL_CHECK(valid_value_type(static_cast<uint32_t>(type)), "unknown array element type {}",
                static_cast<uint32_t>(type));
    QUILL_CHECK(n <= bytes.size() / min_value_size(type), "{} array elements in {} bytes", n, bytes.size());
    GgufArray a;
    a.type_ = type;
    a.size_ = static_cast<size_t>(n);
    a.owner_ = std::move(owner);
    size_t end = 0;
    if (fixed_size(type) != 0) {
        end = elements_size(type, n, bytes, 0, 1);
    } else {
        a.index_.reserve((a.size_ + kIndexStride - 1) / kIndexStride);
        for (size_t i = 0; i < a.size_; ++i) {
            if (i % kIndexStride == 0) a.index_.push_back(end);
            end += element_size(type, bytes, end, 1);
        }
    }
    a.bytes_ = bytes.first(end);
    return a;
}

size_t GgufArray::offset_of(size_t i) const {
    QUILL_CHECK(i < size_, "array element {} of {}", i, size_);
    if (const size_t size = fixed_size(type_)) return i * size;
    size_t at = index_[i / kIndexStride];
    for (size_t k = i / kIndexStride * kIndexStride; k < i; ++k) at += element_size(type_, bytes_, at, 1);
    return at;
}

GgufValue GgufArray::at(size_t i) const {
    const size_t pos = offset_of(i);
    switch (type_) {
        case GgufType::U8: return load<uint8_t>(bytes_, pos);
        case GgufType::I8: return load<int8_t>(bytes_, pos);
        case GgufType::U16: return load<uint16_t>(bytes_, pos);
        case GgufType::I16: return load<int16_t>(bytes_, pos);
        case GgufType::U32: return load<uint32_t>(bytes_, pos);
        case GgufType::I32: return load<int32_t>(bytes_, pos);
        case GgufType::F32: return load<float>(bytes_, pos);
        case GgufType::U64: return load<uint64_t>(bytes_, pos);
        case GgufType::I64: return load<int64_t>(bytes_, pos);
        case GgufType::F64: return load<double>(bytes_, pos);
        case GgufType::BOOL: return load<uint8_t>(bytes_, pos) != 0;
        case GgufType::STRING: return std::string(string_at(i));
        case GgufType::ARRAY:
            return from_encoded(static_cast<GgufType>(load<uint32_t>(bytes_, pos)), load<uint64_t>(bytes_, pos + 4),
                                bytes_.subspan(pos + 12), owner_);
    }
    QUILL_CHECK(false, "unknown array element type {}", static_cast<uint32_t>(type_));
    return {};
}

std::string_view GgufArray::string_at(size_t i) const {
    QUILL_CHECK(type_ == GgufType::STRING, "string_at on an array of {}", gguf_type_name(type_));
    const size_t pos = offset_of(i);
    const auto len = load<uint64_t>(bytes_, pos);
    return {reinterpret_cast<const char*>(bytes_.data() + pos + 8), static_cast<size_t>(len)};
}

bool GgufArray::operator==(const GgufArray& o) const {
    return type_ == o.type_ && size_ == o.size_ && std::ranges::equal(bytes_, o.bytes_);
}

GgufValue GgufValue::array(GgufType type, const std::vector<GgufValue>& items) {
    return GgufValue(GgufArray(type, items));
}

GgufValue GgufValue::strings(const std::vector<std::string>& items) {
    auto buffer = std::make_shared<std::vector<uint8_t>>();
    auto sink = [&](const uint8_t* p, size_t n) { buffer->insert(buffer->end(), p, p + n); };
    for (const auto& s : items) put_string(sink, s);
    const std::span<const uint8_t> bytes(*buffer);
    return GgufValue(GgufArray::from_encoded(GgufType::STRING, items.size(), bytes, std::move(buffer)));
}

bool GgufValue::is_integer() const {
    switch (type()) {
        case GgufType::U8: case GgufType::I8: case GgufType::U16: case GgufType::I16: case GgufType::U32:
        case GgufType::I32: case GgufType::U64: case GgufType::I64: return true;
        default: return false;
    }
}

bool GgufValue::is_number() const {
    return is_integer() || type() == GgufType::F32 || type() == GgufType::F64;
}

int64_t GgufValue::as_int() const {
    if (!is_integer()) throw Error(fmt::format("expected an integer, found {}", gguf_type_name(type())));
    if (const auto* u = std::get_if<uint64_t>(&v)) {
        if (*u > static_cast<uint64_t>(INT64_MAX)) throw Error(fmt::format("integer {} is out of range", *u));
        return static_cast<int64_t>(*u);
    }
    return std::visit(
        [](const auto& x) -> int64_t {
            using T = std::decay_t<decltype(x)>;
            if constexpr (std::is_integral_v<T>) return static_cast<int64_t>(x);
            else return 0;
        },
        v);
}

double GgufValue::as_float() const {
    if (const auto* f = std::get_if<float>(&v)) return *f;
    if (const auto* d = std::get_if<double>(&v)) return *d;
    if (is_integer()) return static_cast<double>(as_int());
    throw Error(fmt::format("expected a number, found {}", gguf_type_name(type())));
}

const std::string& GgufValue::as_string() const {
    if (const auto* s = std::get_if<std::string>(&v)) return *s;
    throw Error(fmt::format("expected a string, found {}", gguf_type_name(type())));
}

const GgufArray& GgufValue::as_array() const {
    if (const auto* a = std::get_if<GgufArray>(&v)) return *a;
    throw Error(fmt::format("expected an array, found {}", gguf_type_name(type())));
}

bool GgufValue::as_bool() const {
    if (const auto* b = std::get_if<bool>(&v)) return *b;
    throw Error(fmt::format("expected a bool, found {}", gguf_type_name(type())));
}

bool GgufValue::operator==(const GgufValue& o) const {
    if (type() != o.type()) return false;
    if (type() == GgufType::F32) {  // compare bits so that NaN round trips compare equal
        float x = std::get<float>(v), y = std::get<float>(o.v);
        return std::memcmp(&x, &y, sizeof x) == 0;
    }
    if (type() == GgufType::F64) {
        double x = std::get<double>(v), y = std::get<double>(o.v);
        return std::memcmp(&x, &y, sizeof x) == 0;
    }
    return v == o.v;
}

// ---------------------------------------------------------------------------------------------------------------
// GgufFile

GgufFile GgufFile::open(const std::string& path) {
    FileDescriptor fd = open_regular_file(path, "the GGUF file");
    struct stat st {};
    if (fstat(fd.get(), &st) != 0) throw FileError(fmt::format("{}: cannot stat: {}", path, std::strerror(errno)));
    auto map = std::make_shared<Mapping>();
    map->size = static_cast<size_t>(st.st_size);
    if (map->size > 0) {
        // Pages come from the file as they are touched: a file rewritten in place while mapped is read as it is
        // then, and one that shrinks raises SIGBUS past its new end (signals::install_fault_handlers() turns that
        // into an error line). Replacing the file by a rename is safe: the mapping keeps the old one.
        void* addr = mmap(nullptr, map->size, PROT_READ, MAP_PRIVATE, fd.get(), 0);
        if (addr == MAP_FAILED) throw FileError(fmt::format("{}: cannot map: {}", path, std::strerror(errno)));
        map->addr = addr;
    }
    GgufFile f;
    f.path_ = path;
    f.bytes_ = {static_cast<const uint8_t*>(map->addr), map->size};
    f.storage_ = std::move(map);
    f.parse_all();
    return f;
}

GgufFile GgufFile::parse(const std::string& name, std::span<const uint8_t> bytes) {
    // A 64-byte aligned copy, so tensor data is as aligned as in a mapping.
    size_t cap = align_up(std::max<size_t>(bytes.size(), 1), 64);
    std::shared_ptr<uint8_t> copy(static_cast<uint8_t*>(std::aligned_alloc(64, cap)), std::free);
    if (!copy) throw Error(fmt::format("{}: out of memory copying {} bytes", name, bytes.size()));
    if (!bytes.empty()) std::memcpy(copy.get(), bytes.data(), bytes.size());
    GgufFile f;
    f.path_ = name;
    f.bytes_ = {copy.get(), bytes.size()};
    f.storage_ = std::move(copy);
    f.parse_all();
    return f;
}

void GgufFile::fail(const std::string& defect) const { throw FileError(fmt::format("{}: {}", path_, defect)); }

void GgufFile::parse_all() {
    Cursor c(bytes_, path_, storage_);
    if (bytes_.size() < 4) fail(fmt::format("not a GGUF file: {} bytes is too short for the magic", bytes_.size()));
    uint32_t magic = c.read<uint32_t>("magic");
    if (magic != kMagic) fail(fmt::format("not a GGUF file: bad magic 0x{:08x}", magic));
    version_ = c.read<uint32_t>("version");
    if (version_ != 2 && version_ != 3) fail(fmt::format("unsupported GGUF version {} (2 and 3 are)", version_));
    // A tensor info is at least: name length 8 + 1 byte, n_dims 4, one dim 8, type 4, offset 8.
    uint64_t n_tensors = c.read_count(33, "tensor count");
    // A key/value is at least: key length 8, type 4, a 1-byte value.
    uint64_t n_kv = c.read_count(13, "metadata count");

    kv_.reserve(n_kv);
    for (uint64_t i = 0; i < n_kv; ++i) {
        std::string key = c.read_string(fmt::format("metadata key {}", i));
        if (key.empty()) fail(fmt::format("metadata key {} is empty", i));
        uint32_t t = c.read<uint32_t>("value type");
        if (!valid_value_type(t)) fail(fmt::format("key '{}': unknown value type {}", key, t));
        GgufValue value = read_value(c, static_cast<GgufType>(t), 0, key);
        if (!kv_index_.emplace(key, kv_.size()).second) fail(fmt::format("duplicate metadata key '{}'", key));
        kv_.emplace_back(std::move(key), std::move(value));
    }

    if (const GgufValue* a = find("general.alignment")) {
        if (!a->is_integer()) fail(fmt::format("general.alignment is a {}, expected u32", gguf_type_name(a->type())));
        int64_t v = a->as_int();
        if (v <= 0 || (v & (v - 1)) != 0 || v > (1 << 24))
            fail(fmt::format("general.alignment {} is not a power of two up to 2^24", v));
        alignment_ = static_cast<uint64_t>(v);
    } else {
        alignment_ = kDefaultAlignment;
    }

    tensors_.reserve(n_tensors);
    for (uint64_t i = 0; i < n_tensors; ++i) {
        GgufTensorInfo t;
        t.name = c.read_string(fmt::format("tensor {} name", i));
        if (t.name.empty()) fail(fmt::format("tensor {} has an empty name", i));
        uint32_t n_dims = c.read<uint32_t>("tensor n_dims");
        if (n_dims < 1 || n_dims > 4) fail(fmt::format("tensor '{}': n_dims {} is outside 1..4", t.name, n_dims));
        uint64_t n_elements = 1;
        for (uint32_t d = 0; d < n_dims; ++d) {
            uint64_t ne = c.read<uint64_t>("tensor dimension");
            if (ne == 0 || ne > static_cast<uint64_t>(INT64_MAX))
                fail(fmt::format("tensor '{}': dimension {} is {}", t.name, d, static_cast<int64_t>(ne)));
            if (__builtin_mul_overflow(n_elements, ne, &n_elements) || n_elements > static_cast<uint64_t>(INT64_MAX))
                fail(fmt::format("tensor '{}': the element count overflows", t.name));
            t.ne.push_back(static_cast<int64_t>(ne));
        }
        t.n_elements = static_cast<int64_t>(n_elements);
        uint32_t type = c.read<uint32_t>("tensor type");
        const TypeTraits* tr = find_type_traits(type);
        if (!tr) fail(fmt::format("tensor '{}': unknown tensor type {}", t.name, type));
        t.type = tr->type;
        if (t.ne[0] % tr->block_size != 0)
            fail(fmt::format("tensor '{}': row length {} is not a multiple of the {} block size {}", t.name,
                             t.ne[0], tr->name, tr->block_size));
        uint64_t blocks = n_elements / static_cast<uint64_t>(tr->block_size);
        uint64_t n_bytes = 0;
        if (__builtin_mul_overflow(blocks, static_cast<uint64_t>(tr->type_size), &n_bytes))
            fail(fmt::format("tensor '{}': the byte size overflows", t.name));
        t.n_bytes = n_bytes;
        t.offset = c.read<uint64_t>("tensor offset");
        if (t.offset % alignment_ != 0)
            fail(fmt::format("tensor '{}': data offset {} is not aligned to {}", t.name, t.offset, alignment_));
        if (!tensor_index_.emplace(t.name, tensors_.size()).second)
            fail(fmt::format("duplicate tensor name '{}'", t.name));
        tensors_.push_back(std::move(t));
    }

    data_offset_ = align_up(c.pos(), alignment_);
    if (!tensors_.empty() && data_offset_ > bytes_.size())
        fail(fmt::format("truncated: the data section starts at {} but the file ends at {}", data_offset_,
                         bytes_.size()));
    parts_ = {GgufPart{path_, bytes_.size(), data_offset_}};
    part_data_ = {bytes_.data() + std::min<uint64_t>(data_offset_, bytes_.size())};
    uint64_t data_size = bytes_.size() > data_offset_ ? bytes_.size() - data_offset_ : 0;
    for (const auto& t : tensors_) {
        if (t.offset > data_size || t.n_bytes > data_size - t.offset)
            fail(fmt::format("tensor '{}': data [{}, +{}) runs past the end of the data section ({} bytes)", t.name,
                             t.offset, t.n_bytes, data_size));
    }
    // No two tensors share bytes.
    std::vector<const GgufTensorInfo*> by_offset;
    for (const auto& t : tensors_) by_offset.push_back(&t);
    std::sort(by_offset.begin(), by_offset.end(), [](auto* a, auto* b) { return a->offset < b->offset; });
    for (size_t i = 1; i < by_offset.size(); ++i) {
        if (by_offset[i - 1]->offset + by_offset[i - 1]->n_bytes > by_offset[i]->offset)
            fail(fmt::format("tensors '{}' and '{}' overlap", by_offset[i - 1]->name, by_offset[i]->name));
    }
}

const GgufValue* GgufFile::find(std::string_view key) const {
    auto it = kv_index_.find(std::string(key));
    return it == kv_index_.end() ? nullptr : &kv_[it->second].second;
}

std::optional<std::string> GgufFile::get_string(std::string_view key) const {
    const GgufValue* v = find(key);
    if (!v) return std::nullopt;
    if (v->type() != GgufType::STRING)
        fail(fmt::format("metadata '{}' has type {}, expected a string", key, gguf_type_name(v->type())));
    return v->as_string();
}

std::optional<int64_t> GgufFile::get_int(std::string_view key) const {
    const GgufValue* v = find(key);
    if (!v) return std::nullopt;
    if (!v->is_integer())
        fail(fmt::format("metadata '{}' has type {}, expected an integer", key, gguf_type_name(v->type())));
    try {
        return v->as_int();
    } catch (const Error& e) {
        fail(fmt::format("metadata '{}': {}", key, e.what()));
    }
}

std::optional<double> GgufFile::get_float(std::string_view key) const {
    const GgufValue* v = find(key);
    if (!v) return std::nullopt;
    if (!v->is_number())
        fail(fmt::format("metadata '{}' has type {}, expected a number", key, gguf_type_name(v->type())));
    return v->as_float();
}

std::optional<bool> GgufFile::get_bool(std::string_view key) const {
    const GgufValue* v = find(key);
    if (!v) return std::nullopt;
    if (v->type() != GgufType::BOOL)
        fail(fmt::format("metadata '{}' is a {}, expected a bool", key, gguf_type_name(v->type())));
    return v->as_bool();
}

const GgufArray* GgufFile::get_array(std::string_view key, GgufType elem) const {
    const GgufValue* v = find(key);
    if (!v) return nullptr;
    if (v->type() != GgufType::ARRAY)
        fail(fmt::format("metadata '{}' is a {}, expected an array", key, gguf_type_name(v->type())));
    const GgufArray& a = v->as_array();
    if (a.type() != elem)
        fail(fmt::format("metadata '{}' is an array of {}, expected an array of {}", key, gguf_type_name(a.type()),
                         gguf_type_name(elem)));
    return &a;
}

const GgufTensorInfo* GgufFile::find_tensor(std::string_view name) const {
    auto it = tensor_index_.find(std::string(name));
    return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

void GgufFile::append_part(GgufFile part) {
    QUILL_CHECK(part.parts_.size() == 1, "{}: a part of a split model has {} parts itself", part.path_,
                part.parts_.size());
    for (const GgufTensorInfo& t : part.tensors_)  // checked before anything changes, so a failure leaves this whole
        if (const GgufTensorInfo* seen = find_tensor(t.name))
            throw FileError(fmt::format("{}: tensor '{}' is also in {}: a tensor is named twice in the split model",
                                        part.path_, t.name, parts_[seen->part].path));
    const auto index = static_cast<uint32_t>(parts_.size());
    tensors_.reserve(tensors_.size() + part.tensors_.size());
    for (GgufTensorInfo& t : part.tensors_) {
        t.part = index;
        tensor_index_.emplace(t.name, tensors_.size());
        tensors_.push_back(std::move(t));
    }
    parts_.push_back(part.parts_.front());
    part_data_.push_back(part.part_data_.front());
    part_storage_.push_back(std::move(part.storage_));
}

// ---------------------------------------------------------------------------------------------------------------
// GgufWriter

void GgufWriter::set(const std::string& key, GgufValue value) {
    for (auto& [k, v] : kv_) {
        if (k == key) {
            v = std::move(value);
            return;
        }
    }
    kv_.emplace_back(key, std::move(value));
}

void GgufWriter::add_tensor(const std::string& name, GgmlType type, std::vector<int64_t> ne,
                            std::vector<uint8_t> data) {
    add_tensor_view(name, type, std::move(ne), {});
    tensors_.back().owned = std::move(data);
    tensors_.back().data = tensors_.back().owned;
}

void GgufWriter::add_tensor_view(const std::string& name, GgmlType type, std::vector<int64_t> ne,
                                 std::span<const uint8_t> data) {
    QUILL_CHECK(!ne.empty() && ne.size() <= 4, "tensor '{}' has {} dims", name, ne.size());
    for (const auto& t : tensors_) QUILL_CHECK(t.name != name, "duplicate tensor '{}'", name);
    tensors_.push_back(Tensor{name, type, std::move(ne), {}, data});
}

uint64_t GgufWriter::alignment() const {
    for (const auto& [k, v] : kv_)
        if (k == "general.alignment") return static_cast<uint64_t>(v.as_int());
    return kDefaultAlignment;
}

namespace {

template <class Sink>
void put_padding(Sink& sink, uint64_t written, uint64_t alignment) {
    static const uint8_t zeros[64] = {};
    uint64_t pad = align_up(written, alignment) - written;
    while (pad > 0) {
        size_t n = std::min<uint64_t>(pad, sizeof zeros);
        put_raw(sink, zeros, n);
        pad -= n;
    }
}

}  // namespace

template <class Sink>
void GgufWriter::emit(Sink& sink) const {
    const uint64_t align = alignment();
    uint64_t written = 0;
    auto counting = [&](const uint8_t* p, size_t n) {
        sink(p, n);
        written += n;
    };
    put<uint32_t>(counting, kMagic);
    put<uint32_t>(counting, version_);
    put<uint64_t>(counting, tensors_.size());
    put<uint64_t>(counting, kv_.size());
    for (const auto& [k, v] : kv_) {
        put_string(counting, k);
        put<uint32_t>(counting, static_cast<uint32_t>(v.type()));
        put_value(counting, v);
    }
    uint64_t offset = 0;
    for (const auto& t : tensors_) {
        put_string(counting, t.name);
        put<uint32_t>(counting, static_cast<uint32_t>(t.ne.size()));
        int64_t n = 1;
        for (int64_t d : t.ne) {
            put<uint64_t>(counting, static_cast<uint64_t>(d));
            n *= d;
        }
        QUILL_CHECK(t.data.size() == row_size(t.type, n),
                    "tensor '{}' has {} bytes of data, its shape and type need {}", t.name, t.data.size(),
                    row_size(t.type, n));
        put<uint32_t>(counting, static_cast<uint32_t>(t.type));
        put<uint64_t>(counting, offset);
        offset = align_up(offset + t.data.size(), align);
    }
    if (!tensors_.empty()) put_padding(counting, written, align);  // ggml pads only before tensor data
    for (const auto& t : tensors_) {
        put_raw(counting, t.data.data(), t.data.size());
        put_padding(counting, written, align);
    }
}

void GgufWriter::write(const std::string& path) const {
    FILE* f = std::fopen(path.c_str(), "wb");
    if (!f) throw FileError(fmt::format("{}: cannot create: {}", path, std::strerror(errno)));
    bool ok = true;
    auto sink = [&](const uint8_t* p, size_t n) {
        if (ok && n > 0 && std::fwrite(p, 1, n, f) != n) ok = false;
    };
    emit(sink);
    if (std::fclose(f) != 0) ok = false;
    if (!ok) throw FileError(fmt::format("{}: write failed: {}", path, std::strerror(errno)));
}

std::vector<uint8_t> GgufWriter::to_bytes() const {
    std::vector<uint8_t> out;
    auto sink = [&](const uint8_t* p, size_t n) { out.insert(out.end(), p, p + n); };
    emit(sink);
    return out;
}

}  // namespace quill
