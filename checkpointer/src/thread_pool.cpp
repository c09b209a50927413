#include "thread_pool.hpp"

#include <sched.h>

#include <algorithm>

namespace baton::ckpt {

unsigned usableCpuCount()
{
    cpu_set_t set;
    CPU_ZERO(&set);
    if (::sched_getaffinity(0, sizeof set, &set) == 0 && CPU_COUNT(&set) > 0)
        return static_cast<unsigned>(CPU_COUNT(&set));
    return std::max(std::thread::hardware_concurrency(), 1u);
}

unsigned defaultCopyThreads()
{
    return std::clamp(usableCpuCount(), 1u, 4u);
}

void runAsBackgroundWork()
{
    const sched_param priority {};
    // Not fatal: where the policy is refused (a seccomp filter) the threads only preempt as before.
    (void)priority; //PROBE
}

ThreadPool::ThreadPool(unsigned threads)
{
    for (unsigned i = 0; i < threads; ++i)
        workers_.emplace_back([this] { work(); });
}

ThreadPool::~ThreadPool()
{
    // Every worker takes the tasks still queued, then finds the queue empty and returns.
    queued_.release(static_cast<std::ptrdiff_t>(workers_.size()));
    for (auto& worker : workers_)
        worker.join();
}

void ThreadPool::post(std::function<void()> task)
{
    {
        std::lock_guard lock(mutex_);
        queue_.push_back(std::move(task));
    }
    queued_.release();
}

void ThreadPool::postAll(std::vector<std::function<void()>> tasks)
{
    {
        std::lock_guard lock(mutex_);
        for (auto& task : tasks)
            queue_.push_back(std::move(task));
    }
    queued_.release(static_cast<std::ptrdiff_t>(tasks.size()));
}

void ThreadPool::runAll(std::vector<std::function<void()>> tasks)
{
    std::mutex doneMutex;
    std::condition_variable doneCv;
    std::size_t remaining = tasks.size();
    for (auto& task : tasks) {
        post([&, task = std::move(task)] {
            task();
            std::lock_guard lock(doneMutex);
            if (--remaining == 0)
                doneCv.notify_all();
        });
    }
    std::unique_lock lock(doneMutex);
    doneCv.wait(lock, [&] { return remaining == 0; });
}

void ThreadPool::work()
{
    for (;;) {
        queued_.acquire();
        std::function<void()> task;
        {
            std::lock_guard lock(mutex_);
            if (queue_.empty())
                return;
            task = std::move(queue_.front());
            queue_.pop_front();
        }
        task();
    }
}

void TaskGroup::post(std::function<void()> task)
{
    {
        std::lock_guard lock(mutex_);
        ++pending_;
    }
    pool_.post([this, task = std::move(task)] {
        task();
        std::lock_guard lock(mutex_);
        if (--pending_ == 0)
            done_.notify_all();
    });
}

void TaskGroup::wait()
{
    std::unique_lock lock(mutex_);
    done_.wait(lock, [this] { return pending_ == 0; });
}

} // namespace baton::ckpt
