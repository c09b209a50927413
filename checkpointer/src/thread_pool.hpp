// A fixed set of worker threads running queued tasks: the host side of snapshot and restore copies.
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <semaphore>
#include <thread>
#include <vector>

namespace baton::ckpt {

// The CPUs this process may run on: its affinity mask, which Slurm's task plugins narrow to the job's
// cores, not the machine's count that std::thread::hardware_concurrency() gives.
unsigned usableCpuCount();

// Copy threads when the options leave it open: as many as the usable CPUs, 1 to 4.
unsigned defaultCopyThreads();

class ThreadPool {
public:
    explicit ThreadPool(unsigned threads);
    ~ThreadPool();
    ThreadPool(const ThreadPool&) = delete;
    ThreadPool& operator=(const ThreadPool&) = delete;

    unsigned size() const { return static_cast<unsigned>(workers_.size()); }
    void post(std::function<void()> task);
    // Queues all of `tasks` under one lock and then wakes the workers: the caller (a training thread
    // requesting a checkpoint) never waits for a worker that has just woken up and holds the queue.
    void postAll(std::vector<std::function<void()>> tasks);
    // Runs tasks and returns once all of them have finished.
    void runAll(std::vector<std::function<void()>> tasks);

private:
    void work();

    std::mutex mutex_;
    std::deque<std::function<void()>> queue_;
    // One count per queued task, and one per worker when the pool stops. A semaphore, not a condition
    // variable: glibc's pthread_cond_broadcast can wait for earlier waiters to wake up, which would put
    // the copy threads' wake-up latency on the training thread that posts the copies.
    std::counting_semaphore<> queued_ { 0 };
    std::vector<std::thread> workers_;
};

// Tasks posted to a pool that can be waited for together; waits in its destructor too.
class TaskGroup {
public:
    explicit TaskGroup(ThreadPool& pool)
        : pool_(pool)
    { }
    ~TaskGroup() { wait(); }
    TaskGroup(const TaskGroup&) = delete;
    TaskGroup& operator=(const TaskGroup&) = delete;

    void post(std::function<void()> task);
    void wait();

private:
    ThreadPool& pool_;
    std::mutex mutex_;
    std::condition_variable done_;
    std::size_t pending_ = 0;
};

} // namespace baton::ckpt
