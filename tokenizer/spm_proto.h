// The few fields of sentencepiece's ModelProto (src/sentencepiece_model.proto) that quill reads and writes, in
// protobuf wire format, by hand: Debian's libsentencepiece-dev ships no generated .pb.h.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace quill {

struct SpmModel {
    struct Piece {
        std::string piece;
        float score = 0.0f;
        int32_t type = 1;  // SentencePiece.Type: NORMAL 1, UNKNOWN 2, CONTROL 3, USER_DEFINED 4, UNUSED 5, BYTE 6
    };
    std::vector<Piece> pieces;  // ModelProto.pieces (1)
    // TrainerSpec (ModelProto field 2)
    int32_t model_type = 1;      // 3: UNIGRAM 1, BPE 2, WORD 3, CHAR 4
    bool byte_fallback = false;  // 35
    int32_t unk_id = 0;          // 40
    int32_t bos_id = 1;          // 41
    int32_t eos_id = 2;          // 42
    // NormalizerSpec (ModelProto field 3)
    std::string normalizer_name;           // 1
    bool add_dummy_prefix = true;          // 3
    bool remove_extra_whitespaces = true;  // 4
    bool escape_whitespaces = true;        // 5
};

// Parses a serialized ModelProto; fields not listed above are skipped. FileError naming `name` when malformed.
SpmModel parse_spm_model(std::string_view bytes, const std::string& name);
// Serializes the fields above (normalizer without a precompiled charsmap).
std::string serialize_spm_model(const SpmModel& model);

}  // namespace quill
