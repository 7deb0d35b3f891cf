#include "runtime/train/island_membership.h"

#include <algorithm>
#include <sstream>

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

Result<IslandMeeting> IslandMembership::At(int64_t clock) {
  const std::string key = fmt::format("islands/meeting/{}", meetings_++);
  MOTLEY_RETURN_IF_ERROR(root_.SetValue(fmt::format("{}/{}", key, root_.rank()), "here"));
  if (root_.rank() != 0) {
    MOTLEY_ASSIGN_OR_RETURN(const std::string word, root_.WaitValue(key));
    MOTLEY_ASSIGN_OR_RETURN(IslandMeeting m, Decode(word));
    present_ = m.present;
    return m;
  }
  // The lead: every rank of the other islands present has come to the meeting, or is lost.
  std::vector<int> watched;
  for (size_t p = 1; p < present_.size(); ++p)
    for (const int r : ranks_of_island_.at(static_cast<size_t>(present_[p]))) watched.push_back(r);
  MOTLEY_ASSIGN_OR_RETURN(const std::vector<int> lost, root_.ArrivedOrLost(watched, key));
  IslandMeeting m;
  for (const int i : present_) {
    const std::vector<int>& ranks = ranks_of_island_.at(static_cast<size_t>(i));
    const bool gone = std::any_of(ranks.begin(), ranks.end(), [&](int r) {
      return std::find(lost.begin(), lost.end(), r) != lost.end();
    });
    (gone ? m.left_out : m.present).push_back(i);
  }
  if (!m.left_out.empty()) {
    // They join again at the first round's end `rejoin_steps` after the last meeting they took part in
    // (this one's at the earliest), unless the run ends first.
    const int64_t h = inner_steps_;
    const int64_t at = std::max(last_met_ + rejoin_steps_, clock);
    const int64_t stop = (at + h - 1) / h * h;
    if (stop < clock_steps_ && (stop_at_step_ == 0 || stop < stop_at_step_)) stop_at_step_ = stop;
  }
  m.stop_at_step = stop_at_step_;
  last_met_ = clock;
  // Every rank present came here, so each has read the last meeting's word: the store forgets it.
  if (meetings_ >= 2) {
    const std::string last = fmt::format("islands/meeting/{}", meetings_ - 2);
    root_.DeleteValue(last);
    for (const int i : present_)
      for (const int r : ranks_of_island_.at(static_cast<size_t>(i)))
        root_.DeleteValue(fmt::format("{}/{}", last, r));
  }
  present_ = m.present;
  MOTLEY_RETURN_IF_ERROR(root_.SetValue(key, Encode(m)));
  return m;
}

}  // namespace motley
