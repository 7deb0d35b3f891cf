// The one translation unit that compiles toml++'s implementation (TOML_HEADER_ONLY=0 is set for
// the whole core target), so the parser is built with our flags, sanitizers and fuzzing included.
#define TOML_IMPLEMENTATION
#include "core/toml_include.h"
