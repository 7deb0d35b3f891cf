#include "data/hf_tokenizer.h"
#include "data/hf_tokenizer_parts.h"

#include <algorithm>
#include <array>
#include <filesystem>
#include <mutex>
#include <optional>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "core/json_read.h"
#include "core/toml_reader.h"
#include "data/byte_level.h"
#include "data/regex.h"
#include "data/utf8.h"

namespace motley {

using hf::AddedToken;
using hf::Decoder;
using hf::kMetaspace;
using hf::Normalizer;
using hf::PreTokenizer;

namespace {

std::string ReplaceAll(std::string_view text, std::string_view from, std::string_view to) {
  if (from.empty()) return std::string(text);
  std::string out;
  size_t at = 0;
  for (size_t hit; (hit = text.find(from, at)) != std::string_view::npos; at = hit + from.size()) {
    out.append(text.substr(at, hit - at));
    out.append(to);
  }
  out.append(text.substr(at));
  return out;
}

// Splits `pieces` further: each piece's matches of `regex` (unless `remove`) and the gaps between them.
std::vector<std::string> SplitPieces(const std::vector<std::string>& pieces, const Regex& regex,
                                     bool remove) {
  std::vector<std::string> out;
  std::vector<std::pair<size_t, size_t>> matches;
  for (const std::string& p : pieces) {
    matches.clear();
    regex.Matches(p, &matches);
    size_t at = 0;
    for (const auto& [b, e] : matches) {
      if (b > at) out.push_back(p.substr(at, b - at));
      if (!remove) out.push_back(p.substr(b, e - b));
      at = e;
    }
    if (at < p.size()) out.push_back(p.substr(at));
  }
  return out;
}

}  // namespace

std::string hf::TokenizerParts::Normalize(std::string text) const {
  for (const Normalizer& n : normalizers) {
    if (n.kind == Normalizer::Kind::kPrepend) {
      if (!text.empty()) text = n.text + text;
    } else if (n.regex) {
      std::vector<std::pair<size_t, size_t>> matches;
      n.regex->Matches(text, &matches);
      std::string out;
      size_t at = 0;
      for (const auto& [b, e] : matches) out += text.substr(at, b - at) + n.content, at = e;
      text = out + text.substr(at);
    } else {
      text = ReplaceAll(text, n.text, n.content);
    }
  }
  return text;
}

std::vector<std::string> hf::TokenizerParts::PreTokenize(std::string text, bool first) const {
  std::vector<std::string> pieces = {std::move(text)};
  for (const PreTokenizer& p : pre_tokenizers) {
    switch (p.kind) {
      case PreTokenizer::Kind::kSplit:
        pieces = SplitPieces(pieces, *p.regex, p.remove);
        break;
      case PreTokenizer::Kind::kByteLevel:
        if (p.add_prefix_space)
          for (std::string& s : pieces)
            if (s.empty() || s[0] != ' ') s = " " + s;
        if (p.regex) pieces = SplitPieces(pieces, *p.regex, false);
        break;
      case PreTokenizer::Kind::kMetaspace: {
        std::vector<std::string> out;
        for (std::string& s : pieces) {
          s = ReplaceAll(s, " ", p.replacement);
          const bool prepend = p.prepend_scheme == "always" || (p.prepend_scheme == "first" && first);
          if (prepend && s.rfind(p.replacement, 0) != 0) s = p.replacement + s;
          first = false;
          if (!p.split) {
            out.push_back(s);
            continue;
          }
          // Each replacement starts a piece (merged with what follows it).
          size_t at = 0;
          for (size_t hit = s.find(p.replacement, 1); hit != std::string::npos;
               hit = s.find(p.replacement, hit + 1)) {
            if (hit > at) out.push_back(s.substr(at, hit - at));
            at = hit;
          }
          out.push_back(s.substr(at));
        }
        pieces = std::move(out);
        break;
      }
    }
  }
  pieces.erase(std::remove_if(pieces.begin(), pieces.end(), [](const std::string& s) { return s.empty(); }),
               pieces.end());
  return pieces;
}

void hf::TokenizerParts::EncodeWord(const std::string& word, std::vector<uint32_t>* out) const {
  if (ignore_merges) {
    if (auto it = piece_to_id.find(word); it != piece_to_id.end()) {
      out->push_back(it->second);
      return;
    }
  }
  std::vector<uint32_t> symbols;
  symbols.reserve(word.size());
  if (byte_level) {
    for (unsigned char b : word) symbols.push_back(static_cast<uint32_t>(byte_id[b]));
  } else {
    bool last_unk = false;
    for (size_t at = 0; at < word.size();) {
      const size_t len = Utf8Length(static_cast<unsigned char>(word[at]));
      auto it = piece_to_id.find(word.substr(at, len));
      if (it != piece_to_id.end()) {
        symbols.push_back(it->second);
        last_unk = false;
      } else if (byte_fallback &&
                 std::all_of(word.begin() + static_cast<std::ptrdiff_t>(at),
                             word.begin() + static_cast<std::ptrdiff_t>(at + len),
                             [&](char c) { return byte_id[static_cast<unsigned char>(c)] >= 0; })) {
        for (size_t k = at; k < at + len; ++k)
          symbols.push_back(static_cast<uint32_t>(byte_id[static_cast<unsigned char>(word[k])]));
        last_unk = false;
      } else if (!(fuse_unk && last_unk)) {
        symbols.push_back(static_cast<uint32_t>(unk_id));
        last_unk = true;
      }
      at += len;
    }
  }
  merges.Apply(&symbols);
  out->insert(out->end(), symbols.begin(), symbols.end());
}

HfTokenizer::HfTokenizer() = default;
HfTokenizer::~HfTokenizer() = default;

Status HfTokenizer::Encode(std::string_view raw, std::vector<uint32_t>* out) const {
  int64_t replaced = 0;
  const std::string text = ReplaceInvalidUtf8(raw, &replaced);
  replaced_ += replaced;
  const hf::TokenizerParts& im = *impl_;
  // Segments between added tokens, the longest added token at the leftmost place first.
  auto encode_segment = [&](std::string_view segment, bool first) {
    if (segment.empty()) return;
    std::string normalized = im.Normalize(std::string(segment));
    for (const std::string& piece : im.PreTokenize(std::move(normalized), first)) {
      if (piece.size() > 64) {  // long pieces (a whole sentencepiece-style document) are not cached
        im.EncodeWord(piece, out);
        continue;
      }
      {
        std::lock_guard<std::mutex> lock(im.cache_mutex);
        if (auto it = im.cache.find(piece); it != im.cache.end()) {
          out->insert(out->end(), it->second.begin(), it->second.end());
          continue;
        }
      }
      const size_t begin = out->size();
      im.EncodeWord(piece, out);
      std::lock_guard<std::mutex> lock(im.cache_mutex);
      if (im.cache.size() < (1u << 20))
        im.cache.emplace(
            piece, std::vector<uint32_t>(out->begin() + static_cast<std::ptrdiff_t>(begin), out->end()));
    }
  };
  size_t at = 0, segment_start = 0;
  bool first = true;
  while (at < text.size()) {
    const AddedToken* hit = nullptr;
    for (const AddedToken* t : im.added_by_first[static_cast<unsigned char>(text[at])])
      if (text.compare(at, t->content.size(), t->content) == 0) {
        hit = t;
        break;
      }
    if (hit == nullptr) {
      ++at;
      continue;
    }
    encode_segment(std::string_view(text).substr(segment_start, at - segment_start), first);
    out->push_back(hit->id);
    first = false;
    at += hit->content.size();
    segment_start = at;
  }
  encode_segment(std::string_view(text).substr(segment_start), first);
  return Status::Ok();
}

std::string HfTokenizer::Decode(const std::vector<uint32_t>& ids) const {
  const hf::TokenizerParts& im = *impl_;
  std::vector<std::string> tokens;
  for (uint32_t id : ids)
    tokens.push_back(id < im.id_to_piece.size() ? im.id_to_piece[id] : std::string("\xEF\xBF\xBD"));
  if (im.byte_level) {  // pieces are raw bytes already
    std::string text;
    for (const std::string& t : tokens) text += t;
    return text;
  }
  for (const Decoder& d : im.decoders) {
    switch (d.kind) {
      case Decoder::Kind::kByteLevel:
        break;
      case Decoder::Kind::kReplace:
        for (std::string& t : tokens) t = ReplaceAll(t, d.pattern, d.content);
        break;
      case Decoder::Kind::kByteFallback: {
        // Runs of <0xXX> tokens become their bytes; a run that is not UTF-8 becomes U+FFFD per byte.
        std::vector<std::string> out;
        std::string bytes;
        int run = 0;
        auto flush = [&] {
          if (run == 0) return;
          int64_t bad = 0;
          std::string valid = ReplaceInvalidUtf8(bytes, &bad);
          if (bad > 0) {
            valid.clear();
            for (int k = 0; k < run; ++k) valid += "\xEF\xBF\xBD";
          }
          out.push_back(valid);
          bytes.clear();
          run = 0;
        };
        for (const std::string& t : tokens) {
          unsigned value = 0;
          if (t.size() == 6 && t.rfind("<0x", 0) == 0 && t[5] == '>' &&
              std::sscanf(t.c_str() + 3, "%2X", &value) == 1) {
            bytes.push_back(static_cast<char>(value));
            ++run;
          } else {
            flush();
            out.push_back(t);
          }
        }
        flush();
        tokens = std::move(out);
        break;
      }
      case Decoder::Kind::kFuse: {
        std::string all;
        for (const std::string& t : tokens) all += t;
        tokens = {all};
        break;
      }
      case Decoder::Kind::kStrip:
        for (std::string& t : tokens) {
          int start = 0, stop = 0;
          while (start < d.start &&
                 t.compare(static_cast<size_t>(start) * d.content.size(), d.content.size(), d.content) == 0)
            ++start;
          t.erase(0, static_cast<size_t>(start) * d.content.size());
          while (stop < d.stop && t.size() >= d.content.size() &&
                 t.compare(t.size() - d.content.size(), d.content.size(), d.content) == 0) {
            t.erase(t.size() - d.content.size());
            ++stop;
          }
        }
        break;
      case Decoder::Kind::kMetaspace:
        for (size_t i = 0; i < tokens.size(); ++i) {
          tokens[i] = ReplaceAll(tokens[i], d.content, " ");
          if (i == 0 && d.prepend && !tokens[i].empty() && tokens[i][0] == ' ') tokens[i].erase(0, 1);
        }
        break;
    }
  }
  std::string text;
  for (const std::string& t : tokens) text += t;
  return text;
}

}  // namespace motley
