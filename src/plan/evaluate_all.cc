#include "plan/evaluate_all.h"

#include <algorithm>
#include <atomic>
#include <optional>
#include <thread>

namespace motley {

std::vector<Result<PlanEvaluation>> EvaluateAll(const std::vector<Plan>& plans, const PlanEvaluator& evaluate) {
  std::vector<std::optional<Result<PlanEvaluation>>> answers(plans.size());
  std::atomic<size_t> next{0};
  auto work = [&] {
    for (size_t i = next++; i < plans.size(); i = next++) answers[i].emplace(evaluate(plans[i]));
  };
  const size_t threads = std::min<size_t>(plans.size(), std::max(1u, std::thread::hardware_concurrency()));
  std::vector<std::jthread> pool;
  for (size_t t = 1; t < threads; ++t) pool.emplace_back(work);
  work();
  pool.clear();  // joins
  std::vector<Result<PlanEvaluation>> out;
  out.reserve(plans.size());
  for (auto& a : answers) out.push_back(std::move(*a));
  return out;
}

}  // namespace motley
