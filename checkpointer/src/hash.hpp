// XXH3-64 through libxxhash's run-time CPU dispatch (AVX2/AVX-512) where the library provides it: the
// same digests as XXH3_64bits, several times faster than the baseline SSE2 build.
#pragma once

#include <cstddef>
#include <cstdint>

#include <xxhash.h>
#if BATON_XXH_DISPATCH
#include <xxh_x86dispatch.h>
#endif

namespace baton::ckpt {

inline std::uint64_t xxh3(const void* data, std::size_t size)
{
#if BATON_XXH_DISPATCH
    return XXH3_64bits_dispatch(data, size);
#else
    return XXH3_64bits(data, size);
#endif
}

inline void xxh3Update(XXH3_state_t* state, const void* data, std::size_t size)
{
#if BATON_XXH_DISPATCH
    XXH3_64bits_update_dispatch(state, data, size);
#else
    XXH3_64bits_update(state, data, size);
#endif
}

} // namespace baton::ckpt
