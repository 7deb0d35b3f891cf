// The equivalence tests' model, cluster and plan header (fp64 unless asked): what the process-level
// tests (training_fixtures.h, plan_cases.h) and the executor's in-process test
// (src/runtime/executor/executor_test.cc) train.
#pragma once

#include <string>

namespace motley_test {

// "The same model as one device" in fp64 (docs/design.md): what reassociation leaves after 5 AdamW
// steps of the equivalence tests' model is ~1e-15 (one process, microbatches of 4 against the whole
// batch: 2.4e-15; an offloading 3-rank pipeline: 3.0e-15), so 1e-10 leaves five orders of margin
// and still sees a one-in-a-million change to one rank's gradients (~1e-7). In fp32 the same
// noise is ~1e-5 and differs with the CPU's BLAS kernels: fp32 checks measure their floor instead.
inline constexpr double kFp64Tolerance = 1e-10;

// The device type the emulated test clusters are made of.
inline constexpr char kCpuType[] = R"([device_types.cpu]
display_name = "one CPU process"
memory = "2GiB"
memory_bandwidth = "10GB/s"
fp16_flops = "50GFLOPS"
fp32_flops = "50GFLOPS"
host_link = "10GB/s"
source = "test"
)";

// Six such devices on one node: the equivalence tests' cluster.
inline const std::string kCluster = std::string("name = \"cpu6\"\n") + kCpuType + R"([[nodes]]
name = "a"
device = "cpu"
count = 6
interconnect = "pcie"
intra_bandwidth = "10GB/s"
)";

inline constexpr char kModel[] = R"(name = "eq4"
hidden_size = 32
num_layers = 4
num_heads = 4
num_kv_heads = 2
ffn_size = 64
vocab_size = 256
max_seq_len = 64
)";

// The plan files' header for the model and cluster above.
inline std::string PlanHeader(const std::string& precision = "fp64") {
  return "model = \"model.toml\"\ncluster = \"cluster.toml\"\nseq_len = 16\nprecision = \"" + precision +
         "\"\n";
}

}  // namespace motley_test
