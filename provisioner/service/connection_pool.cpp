#include "connection_pool.hpp"

namespace baton::service {

ConnectionPool::ConnectionPool(std::string conninfo, std::size_t size, db::ConnectionOptions options)
    : conninfo_(std::move(conninfo))
    , size_(size)
    , options_(options)
{ }

ConnectionPool::Lease ConnectionPool::borrow()
{
    std::unique_lock lock(mutex_);
    returned_.wait(lock, [&] { return !idle_.empty() || made_ < size_; });
    if (!idle_.empty()) {
        auto connection = std::move(idle_.back());
        idle_.pop_back();
        return Lease(*this, std::move(connection));
    }
    ++made_;
    lock.unlock();
    try {
        return Lease(*this, std::make_unique<db::Connection>(conninfo_, options_));
    } catch (...) {
        const std::lock_guard relock(mutex_);
        --made_;
        returned_.notify_one();
        throw;
    }
}

void ConnectionPool::giveBack(std::unique_ptr<db::Connection> connection)
{
    const std::lock_guard lock(mutex_);
    if (connection)
        idle_.push_back(std::move(connection));
    else
        --made_;
    returned_.notify_one();
}

} // namespace baton::service
