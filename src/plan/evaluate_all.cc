#include "plan/evaluate_all.h"

#include <algorithm>
#include <atomic>
#include <exception>
#include <mutex>
#include <optional>
#include <thread>

namespace motley {

void ForEachOnEveryCore(size_t n, const std::function<void(size_t)>& fn, size_t max_threads) {
  std::atomic<size_t> next{0};
  // An exception in a worker (bad_alloc, say) would end the process from its thread; it is carried
  // to the caller's thread instead, after every worker has stopped, and thrown there.
  std::exception_ptr failure;
  std::mutex failure_mutex;
  auto work = [&] {
    try {
      for (size_t i = next++; i < n; i = next++) fn(i);
    } catch (...) {
      next = n;
      std::lock_guard lock(failure_mutex);
      if (!failure) failure = std::current_exception();
    }
  };
  const size_t threads =
      std::min({n, max_threads, static_cast<size_t>(std::max(1u, std::thread::hardware_concurrency()))});
  std::vector<std::jthread> pool;
  for (size_t t = 1; t < threads; ++t) pool.emplace_back(work);
  work();
  pool.clear();  // joins
  if (failure) std::rethrow_exception(failure);
}

std::vector<Result<PlanEvaluation>> EvaluateAll(const std::vector<Plan>& plans, const PlanEvaluator& evaluate,
                                                const EvaluateBound& bound) {
  std::vector<std::optional<Result<PlanEvaluation>>> answers(plans.size());
  ForEachOnEveryCore(plans.size(), [&](size_t i) { answers[i].emplace(evaluate(plans[i], bound)); });
  std::vector<Result<PlanEvaluation>> out;
  out.reserve(plans.size());
  for (auto& a : answers) out.push_back(std::move(*a));
  return out;
}

}  // namespace motley
