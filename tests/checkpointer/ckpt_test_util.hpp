// Deterministic test state: region contents derived from (seed, iteration), so that a restored
// checkpoint can be checked against the iteration it claims to be.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace baton::test {

inline std::uint64_t mix(std::uint64_t x)
{
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

inline void fillPattern(std::byte* data, std::size_t size, std::uint64_t seed, std::uint64_t iteration)
{
    std::uint64_t state = mix(seed * 1000003u + iteration);
    std::size_t i = 0;
    for (; i + 8 <= size; i += 8) {
        state = mix(state);
        for (int b = 0; b < 8; ++b)
            data[i + b] = static_cast<std::byte>(state >> (8 * b));
    }
    state = mix(state);
    for (unsigned b = 0; i < size; ++i, ++b)
        data[i] = static_cast<std::byte>(state >> (8 * (b & 7)));
}

inline bool matchesPattern(
    const std::byte* data, std::size_t size, std::uint64_t seed, std::uint64_t iteration)
{
    std::vector<std::byte> expected(size);
    fillPattern(expected.data(), size, seed, iteration);
    return size == 0 || std::equal(expected.begin(), expected.end(), data);
}

} // namespace baton::test
