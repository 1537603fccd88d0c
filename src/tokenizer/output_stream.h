#pragma once
// tokenizer/output_stream.h — turns a request's generated token ids into the text a client
// sees while it streams: incremental detokenization (never a broken UTF-8 sequence) plus
// stop strings, which end the output and are not part of it. Text that could still become a
// stop string is held back until it cannot. One per request stream; not thread-safe.

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "tokenizer/tokenizer.h"

namespace tessera::tokenizer {

class OutputStream {
 public:
    OutputStream(const Tokenizer& tokenizer, bool skip_special_tokens, std::vector<std::string> stop);

    struct Delta {
        std::string text;                        // newly final text
        std::optional<std::string> matched_stop;  // set once a stop string ended the output
    };
    // Feed the next token; after a stop string matched, further tokens are ignored.
    Delta add(std::int32_t token);
    // End of generation: whatever was held back (no stop string can match any more).
    std::string finish();
    bool stopped() const { return stopped_; }

 private:
    IncrementalDetokenizer detok_;
    std::vector<std::string> stop_;
    std::size_t longest_stop_ = 0;
    std::string held_;  // decoded text not yet released (could begin a stop string)
    bool stopped_ = false;
};

}  // namespace tessera::tokenizer
