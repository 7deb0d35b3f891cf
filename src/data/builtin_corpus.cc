#include "data/builtin_corpus.h"

#include <array>
#include <cstdint>

namespace motley {
namespace {

constexpr std::array<const char*, 12> kNames = {"Mara", "Tomas", "Ilse", "Ravi",  "Nell", "Otto",
                                                "Wren", "Basil", "Juno", "Peder", "Ada",  "Lior"};
constexpr std::array<const char*, 10> kPlaces = {
    "the mill",    "the harbour", "the old bridge", "the market", "the orchard",
    "the library", "the bakery",  "the forge",      "the chapel", "the lighthouse"};
constexpr std::array<const char*, 10> kThings = {
    "a lantern",           "a basket of pears", "three candles",  "a letter",           "a coil of rope",
    "a loaf of rye bread", "a brass key",       "a jar of honey", "a map of the coast", "a wooden flute"};
constexpr std::array<const char*, 6> kWeather = {
    "the rain had stopped", "a cold wind came off the sea", "the sun was low",
    "fog lay on the river", "the first snow was falling",   "the bells were ringing"};
constexpr std::array<const char*, 21> kNumbers = {
    "zero",     "one",     "two",     "three",     "four",     "five",     "six",
    "seven",    "eight",   "nine",    "ten",       "eleven",   "twelve",   "thirteen",
    "fourteen", "fifteen", "sixteen", "seventeen", "eighteen", "nineteen", "twenty"};

// A small deterministic generator (64-bit LCG), so the corpus is the same everywhere.
struct Rng {
  uint64_t state = 0x5eed1234abcdULL;
  size_t Next(size_t n) {
    state = state * 6364136223846793005ULL + 1442695040888963407ULL;
    return static_cast<size_t>((state >> 33) % n);
  }
};

template <size_t N>
const char* Pick(Rng& r, const std::array<const char*, N>& a) {
  return a[r.Next(N)];
}

std::string Make() {
  Rng r;
  std::string text;
  text.reserve(420000);
  while (text.size() < 400000) {
    const char* who = Pick(r, kNames);
    const char* other = Pick(r, kNames);
    const char* from = Pick(r, kPlaces);
    const char* to = Pick(r, kPlaces);
    const char* thing = Pick(r, kThings);
    const size_t a = r.Next(11), b = r.Next(10);
    text += "When ";
    text += Pick(r, kWeather);
    text += ", ";
    text += who;
    text += " left ";
    text += from;
    text += " with ";
    text += thing;
    text += ". ";
    text += who;
    text += " walked to ";
    text += to;
    text += ", where ";
    text += other;
    text += " was waiting. ";
    text += other;
    text += " counted ";
    text += kNumbers[a];
    text += " and ";
    text += kNumbers[b];
    text += " and said: ";
    text += kNumbers[a];
    text += " and ";
    text += kNumbers[b];
    text += " make ";
    text += kNumbers[a + b];
    text += ".";
    text += r.Next(4) == 0 ? "\n\n" : " ";
  }
  return text;
}

}  // namespace

const std::string& BuiltinCorpus() {
  static const std::string corpus = Make();
  return corpus;
}

}  // namespace motley
