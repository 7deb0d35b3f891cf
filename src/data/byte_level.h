// GPT-2's byte-level alphabet, in which byte-level BPE vocabularies (GPT-2, Llama 3) write their
// tokens: printable bytes stand for themselves, the others for code points from 256 up, so every
// byte is a visible character in a vocabulary file ("Ġ" is the space).
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace motley {

/// Raw bytes as the alphabet writes them (UTF-8).
std::string ByteLevelEncode(std::string_view bytes);
/// The raw bytes a string of the alphabet stands for; nothing when it holds another character.
std::optional<std::string> ByteLevelDecode(std::string_view text);

}  // namespace motley
