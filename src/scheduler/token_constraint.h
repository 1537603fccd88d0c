#pragma once
// scheduler/token_constraint.h — what the scheduler needs from constrained decoding (a
// request's regex or JSON schema, compiled by the front): the tokens allowed next, told after
// each output token, and whether the constrained output is complete. The scheduler puts the
// allowed set into the step (SequenceSampling::allowed_tokens) and feeds each sampled token
// back, as SGLang's scheduler does with req.grammar (fill_vocab_mask / accept_token).
// Used on the scheduler thread only.

#include <cstdint>
#include <memory>
#include <vector>

#include "base/status.h"

namespace tessera::scheduler {

class TokenConstraint {
 public:
    virtual ~TokenConstraint() = default;
    // Bit t of word t / 32 set: token t may come next. An error ends the request.
    virtual StatusOr<std::shared_ptr<const std::vector<std::uint32_t>>> allowed_tokens() = 0;
    // An output token was sampled; false when the constraint did not allow it.
    virtual bool accept(std::int32_t token) = 0;
    // A stop token ended a complete match: the request finishes ("stop").
    virtual bool terminated() const = 0;
};

}  // namespace tessera::scheduler
