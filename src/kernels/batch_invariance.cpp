#include "kernels/batch_invariance.h"

#include <atomic>

namespace tessera::kernels {

namespace {
std::atomic<bool> g_batch_invariant{false};
}  // namespace

void set_batch_invariant(bool on) { g_batch_invariant.store(on, std::memory_order_relaxed); }

bool batch_invariant() { return g_batch_invariant.load(std::memory_order_relaxed); }

}  // namespace tessera::kernels
