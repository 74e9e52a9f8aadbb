// GGUF (versions 2 and 3): a strict reader over an mmap'ed file and a writer.
//
// The reader validates everything before anything is used: magic, version, every count and length against the bytes
// that remain, value and tensor types, dimensions and their products, tensor data inside the file and aligned, no
// duplicate keys or tensor names. A defect throws FileError("<path>: <defect>").
#pragma once

#include "engine/format/quant.h"

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <variant>
#include <vector>

namespace quill {

enum class GgufType : uint32_t {
    U8 = 0, I8 = 1, U16 = 2, I16 = 3, U32 = 4, I32 = 5, F32 = 6, BOOL = 7, STRING = 8, ARRAY = 9,
    U64 = 10, I64 = 11, F64 = 12,
};
std::string_view gguf_type_name(GgufType type);

struct GgufValue;

// An array value. Its elements are kept as GGUF stores them (scalars back to back; a string as its u64 length and
// bytes; an array as its u32 element type, u64 count and elements) in one buffer the array shares: a read file's
// mapping, or a buffer of its own for an array built in memory. Variable-size elements (strings, arrays) are found
// from the offset of every 16th, so an array costs its bytes in the file and half a byte per element at most.
class GgufArray {
public:
    GgufArray() = default;  // an empty array of u8
    // An array of `type` holding `items`, each of that type (QUILL_CHECK).
    GgufArray(GgufType type, const std::vector<GgufValue>& items);
    // The n elements of `type` encoded at the start of `bytes` (which may go on past them), whose memory `owner`
    // keeps alive. QUILL_CHECK when they run past the bytes or nest arrays deeper than 4 (GgufFile validated them).
    static GgufArray from_encoded(GgufType type, uint64_t n, std::span<const uint8_t> bytes,
                                  std::shared_ptr<const void> owner);

    GgufType type() const { return type_; }
    size_t size() const { return size_; }
    bool empty() const { return size_ == 0; }
    // Element i (< size()) as a value; a nested array shares this array's bytes.
    GgufValue at(size_t i) const;
    // Element i (< size()) of an array of strings, viewing the shared bytes (valid while this array or a copy lives).
    std::string_view string_at(size_t i) const;
    // The elements in GGUF's encoding, without the array's own type and count.
    std::span<const uint8_t> encoded() const { return bytes_; }
    bool operator==(const GgufArray& o) const;

private:
    size_t offset_of(size_t i) const;  // of element i in bytes_

    GgufType type_ = GgufType::U8;
    size_t size_ = 0;
    std::span<const uint8_t> bytes_;
    std::shared_ptr<const void> owner_;
    std::vector<uint64_t> index_;  // variable-size elements: the offset of element k * 16 in bytes_, [ceil(size / 16)]
};

// One metadata value. The variant's index is the GgufType id.
struct GgufValue {
    using Storage = std::variant<uint8_t, int8_t, uint16_t, int16_t, uint32_t, int32_t, float, bool, std::string,
                                 GgufArray, uint64_t, int64_t, double>;
    Storage v;

    GgufValue() = default;
    template <class T>
    GgufValue(T x) : v(std::move(x)) {}  // NOLINT: implicit by design, GgufValue(uint32_t(3))
    GgufValue(const char* s) : v(std::string(s)) {}
    static GgufValue array(GgufType type, const std::vector<GgufValue>& items);
    static GgufValue strings(const std::vector<std::string>& items);

    GgufType type() const { return static_cast<GgufType>(v.index()); }
    bool is_integer() const;
    bool is_number() const;  // integer or float
    // Numeric reads; throw Error when the value is not a number of the asked kind.
    int64_t as_int() const;
    double as_float() const;
    const std::string& as_string() const;
    const GgufArray& as_array() const;
    bool as_bool() const;
    bool operator==(const GgufValue& o) const;
};

struct GgufTensorInfo {
    std::string name;
    GgmlType type;
    std::vector<int64_t> ne;  // dims, innermost first (ne[0] is the row length)
    uint64_t offset;          // from the start of the data section
    int64_t n_elements;
    size_t n_bytes;
    uint32_t part = 0;        // the file holding its data: 0 this one, k the k-th part appended (a split model)
};

// A file whose tensors a GgufFile holds: the file itself, or a later part of a split model (gguf_split.h).
struct GgufPart {
    std::string path;
    uint64_t size = 0;         // bytes
    uint64_t data_offset = 0;  // where its tensor data begins
};

class GgufFile {
public:
    // Maps and validates a file. Throws FileError naming the path and the defect.
    static GgufFile open(const std::string& path);
    // Validates an in-memory image (copied); `name` stands for the path in messages.
    static GgufFile parse(const std::string& name, std::span<const uint8_t> bytes);

    const std::string& path() const { return path_; }
    uint32_t version() const { return version_; }
    uint64_t alignment() const { return alignment_; }
    uint64_t data_offset() const { return data_offset_; }
    std::span<const uint8_t> bytes() const { return bytes_; }

    const std::vector<std::pair<std::string, GgufValue>>& metadata() const { return kv_; }
    const GgufValue* find(std::string_view key) const;
    // Typed lookups: nullopt when absent; FileError when present with another type.
    std::optional<std::string> get_string(std::string_view key) const;
    std::optional<int64_t> get_int(std::string_view key) const;
    std::optional<double> get_float(std::string_view key) const;
    std::optional<bool> get_bool(std::string_view key) const;
    const GgufArray* get_array(std::string_view key, GgufType elem) const;

    const std::vector<GgufTensorInfo>& tensors() const { return tensors_; }
    const GgufTensorInfo* find_tensor(std::string_view name) const;
    const uint8_t* tensor_data(const GgufTensorInfo& t) const { return part_data_[t.part] + t.offset; }

    // This file, then the parts append_part added, in order.
    const std::vector<GgufPart>& parts() const { return parts_; }
    // Takes the tensors of `part`, the next part of this split model (a file of one part: QUILL_CHECK), and keeps
    // its mapping; the metadata stays this file's. FileError naming both files when a tensor name is already here.
    void append_part(GgufFile part);

private:
    GgufFile() = default;
    void parse_all();
    [[noreturn]] void fail(const std::string& defect) const;

    std::string path_;
    std::shared_ptr<const void> storage_;  // owns the mapping or the copy behind bytes_
    std::span<const uint8_t> bytes_;
    uint32_t version_ = 0;
    uint64_t alignment_ = 32;
    uint64_t data_offset_ = 0;
    std::vector<std::pair<std::string, GgufValue>> kv_;
    std::unordered_map<std::string, size_t> kv_index_;
    std::vector<GgufTensorInfo> tensors_;
    std::unordered_map<std::string, size_t> tensor_index_;
    std::vector<GgufPart> parts_;                          // [n parts]
    std::vector<const uint8_t*> part_data_;                // [n parts]: the start of each part's data section
    std::vector<std::shared_ptr<const void>> part_storage_;  // [n parts - 1]: the mappings of the appended parts
};

// Builds a GGUF file: metadata in insertion order, tensors laid out aligned in insertion order.
class GgufWriter {
public:
    explicit GgufWriter(uint32_t version = 3) : version_(version) {}

    // Sets a key (replacing an existing one in place).
    void set(const std::string& key, GgufValue value);
    // Adds a tensor whose bytes the writer keeps.
    void add_tensor(const std::string& name, GgmlType type, std::vector<int64_t> ne, std::vector<uint8_t> data);
    // Adds a tensor whose bytes stay owned by the caller until write() returns.
    void add_tensor_view(const std::string& name, GgmlType type, std::vector<int64_t> ne,
                         std::span<const uint8_t> data);

    void write(const std::string& path) const;
    std::vector<uint8_t> to_bytes() const;

private:
    struct Tensor {
        std::string name;
        GgmlType type;
        std::vector<int64_t> ne;
        std::vector<uint8_t> owned;
        std::span<const uint8_t> data;
    };
    template <class Sink>
    void emit(Sink& sink) const;
    uint64_t alignment() const;

    uint32_t version_;
    std::vector<std::pair<std::string, GgufValue>> kv_;
    std::vector<Tensor> tensors_;
};

}  // namespace quill
