// The ranks of a multi-rank checkpoint as threads of one test process.
#pragma once

#include <exception>
#include <functional>
#include <thread>
#include <vector>

namespace baton::test {

// Runs body(rank) on `size` threads; rethrows the first rank's exception.
inline void runRanks(int size, const std::function<void(int)>& body)
{
    std::vector<std::exception_ptr> errors(static_cast<std::size_t>(size));
    std::vector<std::thread> threads;
    for (int r = 0; r < size; ++r) {
        threads.emplace_back([&, r] {
            try {
                body(r);
            } catch (...) {
                errors[static_cast<std::size_t>(r)] = std::current_exception();
            }
        });
    }
    for (auto& t : threads)
        t.join();
    for (auto& e : errors) {
        if (e)
            std::rethrow_exception(e);
    }
}

} // namespace baton::test
