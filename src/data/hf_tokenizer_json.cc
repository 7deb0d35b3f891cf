// Reading a tokenizer.json (HfTokenizer::Load, FromJson): its model, normalizers, pre-tokenizers,
// decoders and added tokens into hf::TokenizerParts (hf_tokenizer_parts.h), and BOS/EOS from the
// files beside it. Anything outside what hf_tokenizer.cc runs is refused here, by name.
#include <algorithm>
#include <filesystem>
#include <functional>
#include <optional>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "core/json_read.h"
#include "core/toml_reader.h"
#include "data/byte_level.h"
#include "data/hf_tokenizer.h"
#include "data/hf_tokenizer_parts.h"
#include "data/utf8.h"

namespace motley {
namespace fs = std::filesystem;

using hf::AddedToken;
using hf::Decoder;
using hf::kMetaspace;
using hf::Normalizer;
using hf::PreTokenizer;

namespace {

// The most token ids a tokenizer.json may hold (as a model's vocab_size: core/model_parse.cc).
constexpr int64_t kMaxTokenizerVocab = int64_t{1} << 24;

// One error, naming the file, the component's place and what motley supports.
Status Unsupported(const std::string& file, const std::string& where, const std::string& what,
                   const std::string& supported) {
  return Status::InvalidArgument(
      fmt::format("{}: {}: {} is not supported; motley reads {}", file, where, what, supported));
}

std::string TypeOf(const nlohmann::json& j) {
  return j.is_object() ? j.value("type", std::string("?")) : j.dump();
}

// A token named in tokenizer_config.json / special_tokens_map.json: "text" or {"content": "text"}.
std::optional<std::string> TokenText(const nlohmann::json& j, const char* key) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return std::nullopt;
  if (it->is_string()) return it->get<std::string>();
  if (it->is_object() && it->contains("content") && (*it)["content"].is_string())
    return (*it)["content"].get<std::string>();
  return std::nullopt;
}

// The component under `key` of `j` (absent or null: none) read by `one`; a Sequence's parts (its
// `list`), each in turn, named by their place ("pre_tokenizer.pretokenizers[1]").
Status ReadComponents(const nlohmann::json& j, const std::string& key, const char* list,
                      const std::function<Status(const nlohmann::json&, const std::string&)>& one) {
  std::function<Status(const nlohmann::json&, const std::string&)> walk =
      [&](const nlohmann::json& c, const std::string& at) -> Status {
    if (c.is_null()) return Status::Ok();
    if (TypeOf(c) != "Sequence") return one(c, at);
    for (size_t i = 0; i < c.at(list).size(); ++i)
      MOTLEY_RETURN_IF_ERROR(walk(c[list][i], fmt::format("{}.{}[{}]", at, list, i)));
    return Status::Ok();
  };
  auto it = j.find(key);
  return it == j.end() ? Status::Ok() : walk(*it, key);
}

Result<nlohmann::json> ReadJsonFile(const fs::path& path) {
  MOTLEY_ASSIGN_OR_RETURN(std::string text, ReadTextFile(path.string()));
  return ParseJson(text, path.string());
}

uint64_t Fnv1a(std::string_view bytes, uint64_t h = 1469598103934665603ull) {
  for (unsigned char c : bytes) h = (h ^ c) * 1099511628211ull;
  return h;
}

// A vocabulary entry's bytes: as written, or decoded from the byte-level alphabet.
Result<std::string> ToPiece(bool byte_level, const std::string& s, const std::string& where) {
  if (!byte_level) return s;
  std::optional<std::string> bytes = ByteLevelDecode(s);
  if (!bytes)
    return Status::InvalidArgument(fmt::format(
        "{}: model.vocab: {} is not written in the byte-level alphabet its ByteLevel pre-tokenizer uses",
        where, nlohmann::json(s).dump()));
  return *bytes;
}

Status ReadNormalizer(hf::TokenizerParts& im, const std::string& where, const nlohmann::json& n,
                      const std::string& at) {
  const std::string type = TypeOf(n);
  if (type == "Prepend") {
    im.normalizers.push_back({Normalizer::Kind::kPrepend, n.at("prepend").get<std::string>(), "", nullptr});
  } else if (type == "Replace") {
    const nlohmann::json& p = n.at("pattern");
    Normalizer r{Normalizer::Kind::kReplace, "", n.at("content").get<std::string>(), nullptr};
    if (p.contains("String")) {
      r.text = p["String"].get<std::string>();
    } else {
      MOTLEY_ASSIGN_OR_RETURN(r.regex, Regex::Compile(p.at("Regex").get<std::string>(), where + ": " + at));
    }
    im.normalizers.push_back(std::move(r));
  } else {
    return Unsupported(where, at, fmt::format("normalizer {}", nlohmann::json(type).dump()),
                       "the normalizers Sequence, Prepend and Replace (Llama 2 and 3 use no others)");
  }
  return Status::Ok();
}

Status ReadPreTokenizer(hf::TokenizerParts& im, const std::string& where, const nlohmann::json& p,
                        const std::string& at) {
  const std::string type = TypeOf(p);
  if (type == "Split") {
    PreTokenizer s;
    s.kind = PreTokenizer::Kind::kSplit;
    const std::string behavior = p.value("behavior", std::string("Isolated"));
    if (behavior != "Isolated" && behavior != "Removed")
      return Unsupported(where, at + ".behavior", nlohmann::json(behavior).dump(),
                         "Split with the behaviours Isolated and Removed");
    s.remove = behavior == "Removed";
    if (p.value("invert", false))
      return Unsupported(where, at + ".invert", "true", "Split with invert false");
    const nlohmann::json& pattern = p.at("pattern");
    std::string regex = pattern.contains("Regex") ? pattern["Regex"].get<std::string>() : std::string();
    if (pattern.contains("String")) {  // a literal: quoted for PCRE2
      regex = "\\Q" + pattern["String"].get<std::string>() + "\\E";
    }
    MOTLEY_ASSIGN_OR_RETURN(s.regex, Regex::Compile(regex, where + ": " + at + ".pattern"));
    im.pre_tokenizers.push_back(std::move(s));
  } else if (type == "ByteLevel") {
    PreTokenizer b;
    b.kind = PreTokenizer::Kind::kByteLevel;
    b.add_prefix_space = p.value("add_prefix_space", false);
    if (p.value("use_regex", true)) {
      MOTLEY_ASSIGN_OR_RETURN(b.regex, Regex::Compile(kGpt2PreTokenizerPattern, where));
    }
    im.pre_tokenizers.push_back(std::move(b));
  } else if (type == "Metaspace") {
    PreTokenizer m;
    m.kind = PreTokenizer::Kind::kMetaspace;
    m.replacement = p.value("replacement", std::string(kMetaspace));
    m.prepend_scheme = p.value("prepend_scheme", p.value("add_prefix_space", true) ? "always" : "never");
    m.split = p.value("split", true);
    if (m.prepend_scheme != "always" && m.prepend_scheme != "first" && m.prepend_scheme != "never")
      return Unsupported(where, at + ".prepend_scheme", nlohmann::json(m.prepend_scheme).dump(),
                         "always, first and never");
    im.pre_tokenizers.push_back(std::move(m));
  } else {
    return Unsupported(where, at, fmt::format("pre-tokenizer {}", nlohmann::json(type).dump()),
                       "the pre-tokenizers Sequence, Split, ByteLevel and Metaspace");
  }
  return Status::Ok();
}

Status ReadDecoder(hf::TokenizerParts& im, const std::string& where, const nlohmann::json& d,
                   const std::string& at) {
  const std::string type = TypeOf(d);
  if (type == "ByteLevel") {
    im.decoders.push_back({Decoder::Kind::kByteLevel});
  } else if (type == "Replace") {
    const nlohmann::json& p = d.at("pattern");
    if (!p.contains("String"))
      return Unsupported(where, at + ".pattern", p.dump(), "Replace with a String pattern");
    im.decoders.push_back(
        {Decoder::Kind::kReplace, p["String"].get<std::string>(), d.at("content").get<std::string>()});
  } else if (type == "ByteFallback") {
    im.decoders.push_back({Decoder::Kind::kByteFallback});
  } else if (type == "Fuse") {
    im.decoders.push_back({Decoder::Kind::kFuse});
  } else if (type == "Strip") {
    const std::string content = d.at("content").get<std::string>();
    const int start = d.value("start", 0), stop = d.value("stop", 0);
    if (content.empty() || start < 0 || stop < 0 || start > 1024 || stop > 1024)
      return Unsupported(where, at,
                         fmt::format("Strip of {} x {} and {} x {}", start, nlohmann::json(content).dump(),
                                     stop, nlohmann::json(content).dump()),
                         "Strip of a non-empty content, at most 1024 times");
    im.decoders.push_back({Decoder::Kind::kStrip, "", content, start, stop});
  } else if (type == "Metaspace") {
    Decoder m{Decoder::Kind::kMetaspace, "", d.value("replacement", std::string(kMetaspace))};
    m.prepend =
        d.value("prepend_scheme", std::string("always")) != "never" && d.value("add_prefix_space", true);
    im.decoders.push_back(std::move(m));
  } else {
    return Unsupported(where, at, fmt::format("decoder {}", nlohmann::json(type).dump()),
                       "the decoders Sequence, ByteLevel, Replace, ByteFallback, Fuse, Strip and Metaspace");
  }
  return Status::Ok();
}

// The model's merges: "a b" strings (older files) or ["a", "b"] pairs, each naming tokens of the
// vocabulary.
Status ReadMerges(hf::TokenizerParts& im, const nlohmann::json& model, const std::string& where) {
  for (const auto& m : model.at("merges")) {
    std::string a, b;
    if (m.is_string()) {
      const std::string s = m.get<std::string>();
      const size_t space = s.find(' ', 1);
      if (space == std::string::npos)
        return Status::InvalidArgument(
            fmt::format("{}: model.merges: {} is not \"left right\"", where, m.dump()));
      a = s.substr(0, space), b = s.substr(space + 1);
    } else if (m.is_array() && m.size() == 2) {
      a = m[0].get<std::string>(), b = m[1].get<std::string>();
    } else {
      return Status::InvalidArgument(fmt::format("{}: model.merges: {} is not a pair", where, m.dump()));
    }
    MOTLEY_ASSIGN_OR_RETURN(std::string pa, ToPiece(im.byte_level, a, where));
    MOTLEY_ASSIGN_OR_RETURN(std::string pb, ToPiece(im.byte_level, b, where));
    auto ia = im.piece_to_id.find(pa), ib = im.piece_to_id.find(pb), im_ = im.piece_to_id.find(pa + pb);
    if (ia == im.piece_to_id.end() || ib == im.piece_to_id.end() || im_ == im.piece_to_id.end())
      return Status::InvalidArgument(
          fmt::format("{}: model.merges: {} names a token the vocabulary lacks", where, m.dump()));
    im.merges.Add(ia->second, ib->second, im_->second);
  }

  return Status::Ok();
}

struct SpecialTokens {
  int64_t bos_id = -1;
  int64_t eos_id = -1;
  bool add_bos = false;
};

// BOS and EOS: tokenizer_config.json, else special_tokens_map.json, else the post-processor's
// template (its leading special token is BOS).
Result<SpecialTokens> ReadSpecialTokens(const nlohmann::json& j, const hf::TokenizerParts& im,
                                        const std::string& folder_name, const std::string& where) {
  SpecialTokens out;
  std::error_code ec;
  const fs::path folder = folder_name;
  std::optional<std::string> bos, eos;
  std::optional<bool> add_bos, add_eos;
  for (const char* name : {"tokenizer_config.json", "special_tokens_map.json"}) {
    if (folder_name.empty() || !fs::is_regular_file(folder / name, ec)) continue;
    MOTLEY_ASSIGN_OR_RETURN(nlohmann::json c, ReadJsonFile(folder / name));
    if (!bos) bos = TokenText(c, "bos_token");
    if (!eos) eos = TokenText(c, "eos_token");
    if (!add_bos && c.contains("add_bos_token") && c["add_bos_token"].is_boolean())
      add_bos = c["add_bos_token"].get<bool>();
    if (!add_eos && c.contains("add_eos_token") && c["add_eos_token"].is_boolean())
      add_eos = c["add_eos_token"].get<bool>();
  }
  std::optional<std::string> template_bos;
  std::function<void(const nlohmann::json&)> find_template = [&](const nlohmann::json& p) {
    if (!p.is_object()) return;
    if (TypeOf(p) == "Sequence" && p.contains("processors"))
      for (const auto& q : p["processors"]) find_template(q);
    if (TypeOf(p) == "TemplateProcessing" && p.contains("single") && !p["single"].empty() &&
        p["single"][0].contains("SpecialToken"))
      template_bos = p["single"][0]["SpecialToken"].at("id").get<std::string>();
  };
  if (j.contains("post_processor")) find_template(j["post_processor"]);
  if (!bos) bos = template_bos;
  out.add_bos = add_bos.value_or(template_bos.has_value());
  auto id_of = [&](const std::optional<std::string>& s, const char* what) -> Result<int64_t> {
    if (!s) return int64_t{-1};
    for (const AddedToken& a : im.added)
      if (a.content == *s) return int64_t{a.id};
    if (auto it = im.piece_to_id.find(im.byte_level ? *s : *s); it != im.piece_to_id.end())
      return int64_t{it->second};
    return Status::InvalidArgument(
        fmt::format("{}: the {} token {} is not in the vocabulary", where, what, nlohmann::json(*s).dump()));
  };
  MOTLEY_ASSIGN_OR_RETURN(out.bos_id, id_of(bos, "BOS"));
  MOTLEY_ASSIGN_OR_RETURN(out.eos_id, id_of(eos, "EOS"));
  if (out.bos_id < 0) out.add_bos = false;
  (void)add_eos;  // EOS ends every document in prepared data whatever the config says
  return out;
}

// Each byte's token (a byte-level vocabulary must hold all 256; another may as <0xXX> for
// byte_fallback) and the unknown token: text outside the vocabulary must be encodable.
Status IndexBytesAndUnknown(hf::TokenizerParts& im, const nlohmann::json& model, const std::string& where) {
  im.byte_id.fill(-1);
  for (int b = 0; b < 256; ++b) {
    const std::string key =
        im.byte_level ? std::string(1, static_cast<char>(b)) : fmt::format("<0x{:02X}>", b);
    if (auto it = im.piece_to_id.find(key); it != im.piece_to_id.end())
      im.byte_id[static_cast<size_t>(b)] = it->second;
    else if (im.byte_level)
      return Status::InvalidArgument(fmt::format(
          "{}: model.vocab lacks the byte {:#04x}: a byte-level vocabulary holds all 256 bytes", where, b));
  }
  if (model.contains("unk_token") && model["unk_token"].is_string()) {
    auto it = im.piece_to_id.find(model["unk_token"].get<std::string>());
    if (it != im.piece_to_id.end()) im.unk_id = it->second;
  }
  const bool every_byte =
      std::all_of(im.byte_id.begin(), im.byte_id.end(), [](int64_t id) { return id >= 0; });
  if (!im.byte_level && im.unk_id < 0 && !(im.byte_fallback && every_byte))
    return Status::InvalidArgument(
        fmt::format("{}: model: neither an unk_token in the vocabulary nor byte_fallback with all 256 "
                    "<0xXX> tokens: text "
                    "outside the vocabulary could not be encoded",
                    where));
  return Status::Ok();
}

}  // namespace

Result<std::unique_ptr<HfTokenizer>> HfTokenizer::Load(const std::string& path) {
  fs::path file(path);
  std::error_code ec;
  if (fs::is_directory(file, ec)) file /= "tokenizer.json";
  if (!fs::is_regular_file(file, ec))
    return Status::NotFound(fmt::format(
        "{}: no tokenizer.json (give a Hugging Face model folder or its tokenizer.json)", file.string()));
  MOTLEY_ASSIGN_OR_RETURN(std::string text, ReadTextFile(file.string()));
  return FromJson(text, file.string(), file.parent_path().string());
}

Result<std::unique_ptr<HfTokenizer>> HfTokenizer::FromJson(std::string_view text, const std::string& where,
                                                           const std::string& folder_name) {
  MOTLEY_ASSIGN_OR_RETURN(nlohmann::json j, ParseJson(text, where));
  if (!j.is_object()) return Status::InvalidArgument(fmt::format("{}: expected a JSON object", where));
  std::unique_ptr<HfTokenizer> t(new HfTokenizer());
  t->path_ = where;
  t->impl_ = std::make_unique<hf::TokenizerParts>();
  hf::TokenizerParts& im = *t->impl_;

  try {
    // The model: BPE only.
    const nlohmann::json& model = j.at("model");
    if (TypeOf(model) != "BPE")
      return Unsupported(where, "model.type", nlohmann::json(TypeOf(model)).dump(),
                         "BPE models (Llama 2, Llama 3)");
    // The vocabulary is byte-level when a ByteLevel pre-tokenizer or decoder says so.
    const std::string dump_pre = j.contains("pre_tokenizer") ? j["pre_tokenizer"].dump() : "";
    const std::string dump_dec = j.contains("decoder") ? j["decoder"].dump() : "";
    im.byte_level = dump_pre.find("\"ByteLevel\"") != std::string::npos ||
                    dump_dec.find("\"ByteLevel\"") != std::string::npos;
    im.byte_fallback = model.value("byte_fallback", false);
    im.fuse_unk = model.value("fuse_unk", false);
    im.ignore_merges = model.value("ignore_merges", false);
    if (model.contains("dropout") && !model["dropout"].is_null() && model["dropout"].get<double>() != 0.0)
      return Unsupported(where, "model.dropout", model["dropout"].dump(), "BPE without dropout");

    auto to_piece = [&](const std::string& s) { return ToPiece(im.byte_level, s, where); };
    int64_t max_id = -1;
    std::vector<std::pair<std::string, uint32_t>> vocab;
    for (const auto& [key, value] : model.at("vocab").items()) {
      if (!value.is_number_integer() || value.get<int64_t>() < 0 ||
          value.get<int64_t>() >= kMaxTokenizerVocab)
        return Status::InvalidArgument(fmt::format("{}: model.vocab[{}]: expected a token id, got {}", where,
                                                   nlohmann::json(key).dump(), value.dump()));
      MOTLEY_ASSIGN_OR_RETURN(std::string piece, to_piece(key));
      vocab.emplace_back(std::move(piece), value.get<uint32_t>());
      max_id = std::max<int64_t>(max_id, value.get<int64_t>());
    }
    std::vector<AddedToken> added;
    if (j.contains("added_tokens") && j["added_tokens"].is_array()) {
      for (const auto& a : j["added_tokens"]) {
        const nlohmann::json& id = a.at("id");
        if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() >= kMaxTokenizerVocab)
          return Status::InvalidArgument(fmt::format("{}: added_tokens: id {} is not a token id below {}",
                                                     where, id.dump(), kMaxTokenizerVocab));
        AddedToken token{a.at("content").get<std::string>(), id.get<uint32_t>(), a.value("special", false)};
        if (token.content.empty())
          return Status::InvalidArgument(
              fmt::format("{}: added_tokens: token {} has empty content", where, token.id));
        max_id = std::max<int64_t>(max_id, token.id);
        added.push_back(std::move(token));
      }
    }
    if (max_id < 0) return Status::InvalidArgument(fmt::format("{}: model.vocab is empty", where));
    t->vocab_size_ = max_id + 1;
    im.id_to_piece.assign(static_cast<size_t>(max_id + 1), std::string());
    for (auto& [piece, id] : vocab) {
      im.id_to_piece[id] = piece;
      im.piece_to_id.emplace(std::move(piece), id);
    }
    for (const AddedToken& a : added) {
      im.id_to_piece[a.id] = a.content;
    }
    MOTLEY_RETURN_IF_ERROR(IndexBytesAndUnknown(im, model, where));
    MOTLEY_RETURN_IF_ERROR(ReadMerges(im, model, where));

    // Normalizers.
    auto normalizer = [&](const nlohmann::json& c, const std::string& at) {
      return ReadNormalizer(im, where, c, at);
    };
    MOTLEY_RETURN_IF_ERROR(ReadComponents(j, "normalizer", "normalizers", normalizer));

    // Pre-tokenizers.
    auto pre = [&](const nlohmann::json& c, const std::string& at) {
      return ReadPreTokenizer(im, where, c, at);
    };
    MOTLEY_RETURN_IF_ERROR(ReadComponents(j, "pre_tokenizer", "pretokenizers", pre));

    // Decoders.
    auto decoder = [&](const nlohmann::json& c, const std::string& at) {
      return ReadDecoder(im, where, c, at);
    };
    MOTLEY_RETURN_IF_ERROR(ReadComponents(j, "decoder", "decoders", decoder));

    // Added tokens, longest first where several start alike.
    im.added = added;
    std::stable_sort(im.added.begin(), im.added.end(), [](const AddedToken& a, const AddedToken& b) {
      return a.content.size() > b.content.size();
    });
    for (const AddedToken& a : im.added)
      im.added_by_first[static_cast<unsigned char>(a.content[0])].push_back(&a);

    MOTLEY_ASSIGN_OR_RETURN(const SpecialTokens special, ReadSpecialTokens(j, im, folder_name, where));
    t->bos_id_ = special.bos_id;
    t->eos_id_ = special.eos_id;
    t->add_bos_ = special.add_bos;
    t->hash_ = fmt::format(
        "{:016x}",
        Fnv1a(fmt::format("|bos={}|add_bos={}|eos={}", t->bos_id_, t->add_bos_, t->eos_id_), Fnv1a(text)));
  } catch (const nlohmann::json::exception& e) {
    return Status::InvalidArgument(
        fmt::format("{}: not a tokenizer.json motley can read: {}", where, JsonErrorText(e)));
  }
  return t;
}

}  // namespace motley
