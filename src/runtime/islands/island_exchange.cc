#include "runtime/islands/island_exchange.h"

#include <cmath>

#include <fmt/format.h>

#include "core/check.h"

namespace motley {

std::vector<std::string> OuterCompressions() { return {"none", "fp16", "int8"}; }

namespace {

// Every piece flattened into one tensor (the pieces' precision).
torch::Tensor Flat(const std::vector<torch::Tensor>& pieces) {
  std::vector<torch::Tensor> flat;
  for (const torch::Tensor& p : pieces) flat.push_back(p.reshape({-1}));
  return torch::cat(flat);
}

// The flat tensor's values back into the pieces.
void Unflatten(const torch::Tensor& flat, std::vector<torch::Tensor>& pieces) {
  int64_t at = 0;
  for (torch::Tensor& p : pieces) {
    p = flat.narrow(0, at, p.numel()).view(p.sizes()).clone();
    at += p.numel();
  }
}

// int8 with one scale a piece (its largest magnitude over 127): the quantized values, and the scales.
std::pair<torch::Tensor, torch::Tensor> QuantizeInt8(const std::vector<torch::Tensor>& pieces) {
  std::vector<torch::Tensor> q;
  std::vector<double> scales;
  for (const torch::Tensor& p : pieces) {
    const double most = p.numel() == 0 ? 0 : p.abs().max().item<double>();
    const double scale = most > 0 ? most / 127 : 1;
    scales.push_back(scale);
    q.push_back(torch::round(p.reshape({-1}) / scale).clamp(-127, 127).to(torch::kInt8));
  }
  return {torch::cat(q), torch::tensor(scales, torch::kFloat64)};
}

torch::Tensor DequantizeInt8(const torch::Tensor& q, const torch::Tensor& scales,
                             const std::vector<torch::Tensor>& like) {
  std::vector<torch::Tensor> out;
  int64_t at = 0;
  for (size_t i = 0; i < like.size(); ++i) {
    const int64_t n = like[i].numel();
    out.push_back(q.narrow(0, at, n).to(like[i].scalar_type()) *
                  scales[static_cast<int64_t>(i)].item<double>());
    at += n;
  }
  return torch::cat(out);
}

double RelativeError(const torch::Tensor& exact, const torch::Tensor& approx) {
  const double norm = exact.to(torch::kFloat64).norm().item<double>();
  return norm > 0 ? (exact.to(torch::kFloat64) - approx.to(torch::kFloat64)).norm().item<double>() / norm : 0;
}

}  // namespace

std::vector<torch::Tensor> AsArrived(const std::vector<torch::Tensor>& deltas, const std::string& compression,
                                     double* relative_error) {
  torch::NoGradGuard no_grad;
  if (relative_error != nullptr) *relative_error = 0;
  if (compression == "none" || deltas.empty()) return deltas;
  const torch::Tensor mine = Flat(deltas);
  torch::Tensor arrived;
  if (compression == "fp16") {
    arrived = mine.to(torch::kFloat16).to(mine.scalar_type());
  } else {
    MOTLEY_CHECK_MSG(compression == "int8", fmt::format("unknown outer compression {}", compression));
    const auto [q, scales] = QuantizeInt8(deltas);
    arrived = DequantizeInt8(q, scales, deltas);
  }
  if (relative_error != nullptr) *relative_error = RelativeError(mine, arrived);
  std::vector<torch::Tensor> out = deltas;
  Unflatten(arrived, out);
  return out;
}

Result<OuterExchange> AverageAcrossIslands(Communicator& comm, CommGroup& outer,
                                           std::vector<torch::Tensor>& deltas, double weight,
                                           const std::string& compression) {
  MOTLEY_CHECK_GE(outer.index, 0);
  MOTLEY_CHECK_GT(weight, 0);
  OuterExchange done;
  if (deltas.empty()) return done;
  torch::NoGradGuard no_grad;
  const torch::Tensor mine = Flat(deltas);
  const auto dtype = mine.scalar_type();
  const int n = outer.size();
  // The islands' weights, gathered (the sum divides the weighted sum).
  torch::Tensor weights = torch::empty({n}, torch::kFloat64);
  MOTLEY_RETURN_IF_ERROR(comm.AllGather(outer, torch::tensor({weight}, torch::kFloat64), weights));
  const double total = weights.sum().item<double>();
  torch::Tensor sum;
  if (compression == "none") {
    sum = mine * weight;
    MOTLEY_RETURN_IF_ERROR(comm.AllReduceSum(outer, sum));
    done.bytes_sent = static_cast<double>(mine.numel() * mine.element_size());
  } else if (compression == "fp16") {
    const torch::Tensor half = mine.to(torch::kFloat16);
    torch::Tensor all = torch::empty({n * mine.numel()}, half.options());
    MOTLEY_RETURN_IF_ERROR(comm.AllGather(outer, half, all));
    sum = torch::zeros_like(mine);
    for (int i = 0; i < n; ++i)
      sum.add_(all.narrow(0, i * mine.numel(), mine.numel()).to(dtype), weights[i].item<double>());
    done.bytes_sent = static_cast<double>(half.numel() * half.element_size());
    done.compression_error = RelativeError(mine, half);
  } else {
    MOTLEY_CHECK_MSG(compression == "int8", fmt::format("unknown outer compression {}", compression));
    const auto [q, scales] = QuantizeInt8(deltas);
    torch::Tensor all_q = torch::empty({n * q.numel()}, q.options());
    torch::Tensor all_scales = torch::empty({n * scales.numel()}, scales.options());
    MOTLEY_RETURN_IF_ERROR(comm.AllGather(outer, q, all_q));
    MOTLEY_RETURN_IF_ERROR(comm.AllGather(outer, scales, all_scales));
    sum = torch::zeros_like(mine);
    for (int i = 0; i < n; ++i)
      sum.add_(DequantizeInt8(all_q.narrow(0, i * q.numel(), q.numel()),
                              all_scales.narrow(0, i * scales.numel(), scales.numel()), deltas),
               weights[i].item<double>());
    done.bytes_sent = static_cast<double>(q.numel() + scales.numel() * scales.element_size());
    done.compression_error = RelativeError(mine, DequantizeInt8(q, scales, deltas));
  }
  Unflatten(sum / total, deltas);
  return done;
}

}  // namespace motley
