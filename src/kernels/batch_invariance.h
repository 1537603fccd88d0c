#pragma once
// kernels/batch_invariance.h — deterministic inference (SGLang's --enable-deterministic-inference):
// with the switch on, every kernel computes an output row with the same operations in the same
// order whatever else shares the call: how many rows the matmul has, which sequences share an
// attention call, whether a token's keys were written in this chunk or an earlier one. A token's
// logits then depend only on its sequence, never on the batch it was scheduled in, the chunk
// sizes or what the prefix cache held. It costs speed (docs/deterministic-inference.md): AMX
// tiles and the blocked prefill attention are left out. Set once per process, before the first
// forward pass; read by every kernel call.

namespace tessera::kernels {

void set_batch_invariant(bool on);
bool batch_invariant();

}  // namespace tessera::kernels
