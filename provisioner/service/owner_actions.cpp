#include "owner_actions.hpp"

#include <algorithm>
#include <map>
#include <mutex>
#include <thread>

namespace baton::service {

void runPerOwner(std::vector<OwnerAction>& actions, std::size_t threads, std::chrono::steady_clock::time_point deadline,
    const std::function<bool(const std::exception_ptr&)>& timedOut)
{
    // Each owner's actions, in the order given; the owners in the order of their first action.
    std::vector<std::vector<OwnerAction*>> owners;
    std::map<std::int64_t, std::size_t> ownerAt;
    for (OwnerAction& action : actions) {
        const auto [at, added] = ownerAt.try_emplace(action.ownerUid, owners.size());
        if (added)
            owners.emplace_back();
        owners[at->second].push_back(&action);
    }
    const auto runOwner = [&](const std::vector<OwnerAction*>& own) {
        for (OwnerAction* action : own) {
            if (std::chrono::steady_clock::now() >= deadline)
                return; // left for the next tick
            action->ran = true;
            try {
                action->run();
            } catch (...) {
                action->error = std::current_exception();
                if (timedOut(action->error))
                    return; // this owner's next call would likely hang as well
            }
        }
    };
    if (owners.size() <= 1 || threads <= 1) { // nothing to overlap: no thread to start
        for (const auto& own : owners)
            runOwner(own);
        return;
    }
    std::mutex mutex;
    std::size_t next = 0;
    std::vector<std::thread> workers;
    const std::size_t count = std::min(threads, owners.size());
    workers.reserve(count);
    for (std::size_t i = 0; i < count; ++i)
        workers.emplace_back([&] {
            for (;;) {
                std::size_t taken = 0;
                {
                    const std::lock_guard lock(mutex);
                    if (next == owners.size())
                        return;
                    taken = next++;
                }
                runOwner(owners[taken]);
            }
        });
    for (std::thread& worker : workers)
        worker.join();
}

} // namespace baton::service
