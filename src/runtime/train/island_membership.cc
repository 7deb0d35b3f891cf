#include "runtime/train/island_membership.h"

#include <algorithm>
#include <chrono>
#include <optional>
#include <sstream>
#include <thread>

#include <fmt/format.h>
#include <fmt/ranges.h>

namespace motley {
namespace {

// "0,2;40;1": the islands present, the stop step, the islands left out now.
std::string Encode(const IslandMeeting& m) {
  return fmt::format("{};{};{}", fmt::join(m.present, ","), m.stop_at_step, fmt::join(m.left_out, ","));
}

std::vector<int> Numbers(const std::string& text) {
  std::vector<int> out;
  std::stringstream in(text);
  for (std::string item; std::getline(in, item, ',');)
    if (!item.empty()) out.push_back(std::stoi(item));
  return out;
}

Result<IslandMeeting> Decode(const std::string& text) {
  const size_t a = text.find(';'), b = text.find(';', a == std::string::npos ? a : a + 1);
  if (a == std::string::npos || b == std::string::npos)
    return Status::Internal(fmt::format("the lead's word on a meeting of islands is garbled: \"{}\"", text));
  IslandMeeting m;
  m.present = Numbers(text.substr(0, a));
  m.stop_at_step = std::stoll(text.substr(a + 1, b - a - 1));
  m.left_out = Numbers(text.substr(b + 1));
  return m;
}

}  // namespace

IslandMembership::IslandMembership(Communicator& root, std::vector<std::vector<int>> ranks_of_island,
                                   std::vector<int> present, int64_t from_step, int64_t rejoin_steps,
                                   int64_t inner_steps, int64_t clock_steps)
    : root_(root),
      ranks_of_island_(std::move(ranks_of_island)),
      present_(std::move(present)),
      last_met_(from_step),
      rejoin_steps_(rejoin_steps > 0 ? rejoin_steps : inner_steps),
      inner_steps_(inner_steps),
      clock_steps_(clock_steps) {}

int IslandMembership::Lead() {
  for (const int i : present_) {
    const std::vector<int>& ranks = ranks_of_island_.at(static_cast<size_t>(i));
    if (std::none_of(ranks.begin(), ranks.end(), [&](int r) { return root_.Lost(r); })) return ranks.front();
  }
  return -1;
}

Result<IslandMeeting> IslandMembership::At(int64_t clock) {
  const std::string key = fmt::format("islands/meeting/{}", meetings_++);
  MOTLEY_RETURN_IF_ERROR(root_.SetValue(fmt::format("{}/{}", key, root_.rank()), "here"));
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(root_.timeout_s());
  std::string word;
  for (int lead = -1;;) {
    MOTLEY_ASSIGN_OR_RETURN(const std::optional<std::string> there, root_.ValueIfSet(key));
    if (there) {
      word = *there;
      break;
    }
    lead = Lead();
    if (lead == root_.rank()) {
      MOTLEY_ASSIGN_OR_RETURN(const IslandMeeting m, Chair(key, clock, lead));
      MOTLEY_ASSIGN_OR_RETURN(word, root_.SetValueOnce(key, Encode(m)));
      break;
    }
    if (std::chrono::steady_clock::now() > deadline)
      return Status::IoError(fmt::format(
          "rank {}: no word on the islands' meeting at step {} from their lead (rank {}) within {:.0f} s",
          root_.rank(), clock, lead, root_.timeout_s()));
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  MOTLEY_ASSIGN_OR_RETURN(IslandMeeting m, Decode(word));
  present_ = m.present;
  stop_at_step_ = m.stop_at_step;
  last_met_ = clock;
  return m;
}

Result<IslandMeeting> IslandMembership::Chair(const std::string& key, int64_t clock, int lead) {
  // Every rank of the other islands present has come to the meeting, or is lost (the lead's own
  // island's come with it: their steps' collectives are its).
  const auto of_lead = [&](int i) {
    const std::vector<int>& ranks = ranks_of_island_.at(static_cast<size_t>(i));
    return std::find(ranks.begin(), ranks.end(), lead) != ranks.end();
  };
  std::vector<int> watched;
  for (const int i : present_)
    if (!of_lead(i))
      for (const int r : ranks_of_island_.at(static_cast<size_t>(i))) watched.push_back(r);
  MOTLEY_ASSIGN_OR_RETURN(const std::vector<int> lost, root_.ArrivedOrLost(watched, key));
  IslandMeeting m;
  for (const int i : present_) {
    const std::vector<int>& ranks = ranks_of_island_.at(static_cast<size_t>(i));
    const bool gone = std::any_of(ranks.begin(), ranks.end(), [&](int r) {
      return std::find(lost.begin(), lost.end(), r) != lost.end() || root_.Lost(r);
    });
    (gone ? m.left_out : m.present).push_back(i);
  }
  int64_t stop = stop_at_step_;
  if (!m.left_out.empty()) {
    // They join again at the first round's end `rejoin_steps` after the last meeting they took part in
    // (this one's at the earliest), unless the run ends first.
    const int64_t h = inner_steps_;
    const int64_t at = (std::max(last_met_ + rejoin_steps_, clock) + h - 1) / h * h;
    if (at < clock_steps_ && (stop == 0 || at < stop)) stop = at;
  }
  m.stop_at_step = stop;
  // Every rank present came here, so each has read the last meeting's word: the store forgets it.
  if (meetings_ >= 2) {
    const std::string last = fmt::format("islands/meeting/{}", meetings_ - 2);
    root_.DeleteValue(last);
    for (const int i : present_)
      for (const int r : ranks_of_island_.at(static_cast<size_t>(i)))
        root_.DeleteValue(fmt::format("{}/{}", last, r));
  }
  return m;
}

}  // namespace motley
