// Reference tokenizers for motley's tests, from the npm registry (tests/reference/package.json):
//   node tokenizers.mjs llama3-folder DIR         writes a Llama 3 tokenizer.json (+ tokenizer_config.json)
//                                                 built from llama3-tokenizer-js's vocabulary and merges
//   node tokenizers.mjs sp-folder DIR TEXT N      writes a Llama 2-style (sentencepiece BPE, byte
//                                                 fallback) tokenizer.json with N merges learned on TEXT
//   node tokenizers.mjs encode DIR TEXT OUT       ids of TEXT (read as UTF-8 by TextDecoder: invalid
//                                                 bytes become U+FFFD) by @huggingface/tokenizers,
//                                                 without special tokens, as a JSON array
//   node tokenizers.mjs encode-llama3 TEXT OUT    the same by llama3-tokenizer-js
//   node tokenizers.mjs bench DIR TEXT REPEATS    seconds @huggingface/tokenizers takes to encode TEXT
// Nothing it writes is committed: the tests build what they need in a temporary folder.
import fs from "node:fs";
import path from "node:path";
import { Tokenizer } from "@huggingface/tokenizers";
import llama3 from "llama3-tokenizer-js";

const readText = (file) => new TextDecoder("utf-8").decode(fs.readFileSync(file));

// Llama 3's pre-tokenizer pattern, as its published tokenizer.json has it.
const LLAMA3_PATTERN =
  "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

function llama3Folder(dir) {
  const vocab = {};
  const added = [];
  llama3.vocabById.forEach((s, id) => {
    if (id < 128000) vocab[s] = id;
    else added.push({ id, content: s, single_word: false, lstrip: false, rstrip: false, normalized: false, special: true });
  });
  const merges = [...llama3.merges.entries()].sort((a, b) => a[1] - b[1]).map(([m]) => m);
  const json = {
    version: "1.0",
    truncation: null,
    padding: null,
    added_tokens: added,
    normalizer: null,
    pre_tokenizer: {
      type: "Sequence",
      pretokenizers: [
        { type: "Split", pattern: { Regex: LLAMA3_PATTERN }, behavior: "Isolated", invert: false },
        { type: "ByteLevel", add_prefix_space: false, trim_offsets: true, use_regex: false },
      ],
    },
    post_processor: {
      type: "Sequence",
      processors: [
        { type: "ByteLevel", add_prefix_space: true, trim_offsets: false, use_regex: true },
        {
          type: "TemplateProcessing",
          single: [{ SpecialToken: { id: "<|begin_of_text|>", type_id: 0 } }, { Sequence: { id: "A", type_id: 0 } }],
          pair: [{ SpecialToken: { id: "<|begin_of_text|>", type_id: 0 } }, { Sequence: { id: "A", type_id: 0 } },
                 { SpecialToken: { id: "<|begin_of_text|>", type_id: 1 } }, { Sequence: { id: "B", type_id: 1 } }],
          special_tokens: { "<|begin_of_text|>": { id: "<|begin_of_text|>", ids: [128000], tokens: ["<|begin_of_text|>"] } },
        },
      ],
    },
    decoder: { type: "ByteLevel", add_prefix_space: true, trim_offsets: true, use_regex: true },
    model: {
      type: "BPE", dropout: null, unk_token: null, continuing_subword_prefix: null, end_of_word_suffix: null,
      fuse_unk: false, byte_fallback: false, ignore_merges: true, vocab, merges,
    },
  };
  fs.mkdirSync(dir, { recursive: true });
  fs.writeFileSync(path.join(dir, "tokenizer.json"), JSON.stringify(json));
  fs.writeFileSync(path.join(dir, "tokenizer_config.json"), JSON.stringify({
    add_bos_token: true, bos_token: "<|begin_of_text|>", eos_token: "<|end_of_text|>", tokenizer_class: "PreTrainedTokenizerFast",
  }));
}

// A sentencepiece-style BPE as Llama 2 / TinyLlama folders carry it: "▁" for spaces (Prepend and
// Replace normalizers), characters as the base symbols, <0x00>..<0xFF> for byte fallback, merges
// learned here by plain pair counting over the text's words.
function spFolder(dir, textFile, numMerges) {
  const text = readText(textFile);
  const vocab = { "<unk>": 0, "<s>": 1, "</s>": 2 };
  for (let b = 0; b < 256; b++) vocab[`<0x${b.toString(16).toUpperCase().padStart(2, "0")}>`] = 3 + b;
  const add = (s) => { if (!(s in vocab)) vocab[s] = Object.keys(vocab).length; };
  const counts = new Map();
  for (const w of ("▁" + text.replaceAll(" ", "▁")).split(/(?=▁)/u)) counts.set(w, (counts.get(w) || 0) + 1);
  // Characters seen at least twice join the vocabulary (rare ones are left to byte fallback).
  const chars = new Map();
  for (const [w, n] of counts) for (const c of w) chars.set(c, (chars.get(c) || 0) + n);
  for (const [c, n] of [...chars].sort()) if (n >= 2) add(c);
  let words = [...counts].map(([w, n]) => [[...w].filter((c) => c in vocab), n]);
  const merges = [];
  for (let m = 0; m < numMerges; m++) {
    const pairs = new Map();
    for (const [sym, n] of words)
      for (let i = 0; i + 1 < sym.length; i++) { const k = sym[i] + " " + sym[i + 1]; pairs.set(k, (pairs.get(k) || 0) + n); }
    let best = null, bestN = 0;
    for (const [k, n] of pairs) if (n > bestN || (n === bestN && k < best)) { best = k; bestN = n; }
    if (!best || bestN < 2) break;
    const [a, b] = best.split(" ");
    merges.push(best);
    add(a + b);
    words = words.map(([sym, n]) => {
      const out = [];
      for (let i = 0; i < sym.length; i++) {
        if (i + 1 < sym.length && sym[i] === a && sym[i + 1] === b) { out.push(a + b); i++; } else out.push(sym[i]);
      }
      return [out, n];
    });
  }
  const special = (id, content) => ({ id, content, single_word: false, lstrip: false, rstrip: false, normalized: false, special: true });
  const json = {
    version: "1.0", truncation: null, padding: null,
    added_tokens: [special(0, "<unk>"), special(1, "<s>"), special(2, "</s>")],
    normalizer: { type: "Sequence", normalizers: [{ type: "Prepend", prepend: "▁" }, { type: "Replace", pattern: { String: " " }, content: "▁" }] },
    pre_tokenizer: null,
    post_processor: {
      type: "TemplateProcessing",
      single: [{ SpecialToken: { id: "<s>", type_id: 0 } }, { Sequence: { id: "A", type_id: 0 } }],
      pair: [{ SpecialToken: { id: "<s>", type_id: 0 } }, { Sequence: { id: "A", type_id: 0 } },
             { SpecialToken: { id: "<s>", type_id: 1 } }, { Sequence: { id: "B", type_id: 1 } }],
      special_tokens: { "<s>": { id: "<s>", ids: [1], tokens: ["<s>"] } },
    },
    decoder: { type: "Sequence", decoders: [
      { type: "Replace", pattern: { String: "▁" }, content: " " }, { type: "ByteFallback" }, { type: "Fuse" },
      { type: "Strip", content: " ", start: 1, stop: 0 }] },
    model: { type: "BPE", dropout: null, unk_token: "<unk>", continuing_subword_prefix: null, end_of_word_suffix: null,
             fuse_unk: true, byte_fallback: true, ignore_merges: false, vocab, merges },
  };
  fs.mkdirSync(dir, { recursive: true });
  fs.writeFileSync(path.join(dir, "tokenizer.json"), JSON.stringify(json));
  fs.writeFileSync(path.join(dir, "tokenizer_config.json"), JSON.stringify({
    add_bos_token: true, add_eos_token: false, bos_token: "<s>", eos_token: "</s>", unk_token: "<unk>",
  }));
}

function hfTokenizer(dir) {
  const json = JSON.parse(fs.readFileSync(path.join(dir, "tokenizer.json"), "utf8"));
  const config = JSON.parse(fs.readFileSync(path.join(dir, "tokenizer_config.json"), "utf8"));
  return new Tokenizer(json, config);
}

const [cmd, ...args] = process.argv.slice(2);
if (cmd === "llama3-folder") {
  llama3Folder(args[0]);
} else if (cmd === "sp-folder") {
  spFolder(args[0], args[1], Number(args[2]));
} else if (cmd === "encode") {
  const ids = hfTokenizer(args[0]).encode(readText(args[1]), { add_special_tokens: false }).ids;
  fs.writeFileSync(args[2], JSON.stringify(ids));
} else if (cmd === "encode-llama3") {
  fs.writeFileSync(args[1], JSON.stringify(llama3.encode(readText(args[0]), { bos: false, eos: false })));
} else if (cmd === "bench") {
  const t = hfTokenizer(args[0]);
  const text = readText(args[1]);
  t.encode(text, { add_special_tokens: false });  // warm up
  const start = process.hrtime.bigint();
  for (let i = 0; i < Number(args[2]); i++) t.encode(text, { add_special_tokens: false });
  console.log(JSON.stringify({ seconds: Number(process.hrtime.bigint() - start) / 1e9 / Number(args[2]) }));
} else {
  console.error("usage: node tokenizers.mjs llama3-folder|sp-folder|encode|encode-llama3|bench ...");
  process.exit(2);
}
