// `tessera bench serve` / `tessera bench one-batch`: placeholder until the benchmark tools land.

#include "app/commands.h"
#include "base/logging.h"

namespace tessera::app {

int run_bench(int argc, char** argv) {
    TSR_LOG(ERROR, "tessera bench is not implemented yet (bench serve, bench one-batch)");
    return 2;
}

}  // namespace tessera::app
