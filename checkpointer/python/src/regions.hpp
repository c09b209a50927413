// What the Checkpointer and Session bindings share: owning the native object, registering Python objects
// as regions and turning a restore's result into Python values.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <type_traits>
#include <utility>

#include <pybind11/pybind11.h>

#include "baton/ckpt/checkpointer.hpp"
#include "baton/ckpt/error.hpp"

namespace baton::python {

// Registers the memory of `object` (see memoryOf) as region `name`: host memory, or a CUDA tensor as a
// device region ordered on its device's current torch stream. The caller keeps `object` alive.
void registerObject(ckpt::Checkpointer& checkpointer, const std::string& name, pybind11::handle object);

// A SimpleNamespace with restored, iteration, epoch, dir, blobs (dict of bytes), manifest (dict),
// fallbacks (list of (dir, reason)) and unclaimed_regions.
pybind11::object restoreResultToPython(const ckpt::RestoreResult& result);

// Owns a native Checkpointer or Session for Python and holds a reference to every object registered
// with it, so that their memory outlives the registration: the checkpointer reads it during snapshots
// and writes it on restore.
template<typename Native> class RegionOwner {
public:
    RegionOwner(std::unique_ptr<Native> native, const char* closedMessage)
        : impl_(std::move(native))
        , closedMessage_(closedMessage)
    { }

    ~RegionOwner() { close(); }

    Native& impl()
    {
        if (!impl_) {
            throw ckpt::Error(closedMessage_);
        }
        return *impl_;
    }

    void registerRegion(const std::string& name, pybind11::object object)
    {
        registerObject(checkpointer(), name, object);
        objects_[name] = std::move(object);
    }

    void unregisterRegion(const std::string& name)
    {
        {
            pybind11::gil_scoped_release release;
            checkpointer().unregisterRegion(name);
        }
        objects_.erase(name);
    }

    // Restores the newest verified checkpoint into the registered objects; reads without the GIL.
    pybind11::object restore()
    {
        ckpt::RestoreResult result;
        {
            pybind11::gil_scoped_release release;
            result = impl().restore();
        }
        return restoreResultToPython(result);
    }

    // Waits for an in-flight checkpoint, then lets go of the registered objects.
    void close()
    {
        if (impl_) {
            pybind11::gil_scoped_release release;
            impl_.reset();
        }
        objects_.clear();
    }

private:
    ckpt::Checkpointer& checkpointer()
    {
        if constexpr (std::is_same_v<Native, ckpt::Checkpointer>) {
            return impl();
        } else {
            return impl().checkpointer();
        }
    }

    std::map<std::string, pybind11::object> objects_;
    std::unique_ptr<Native> impl_;
    const char* closedMessage_;
};

// baton._native.Checkpointer: keeps every registered object alive for as long as the checkpointer uses
// its memory.
class PyCheckpointer : public RegionOwner<ckpt::Checkpointer> {
public:
    explicit PyCheckpointer(ckpt::Options options)
        : RegionOwner(std::make_unique<ckpt::Checkpointer>(std::move(options)), "the checkpointer is closed")
    { }

    // A session that drives this checkpointer must not outlive it: closing the checkpointer closes the
    // session first (`closeDriver`), unless the session has let go (nullptr).
    void setDriver(std::function<void()> closeDriver) { closeDriver_ = std::move(closeDriver); }

    void close()
    {
        if (auto closeDriver = std::exchange(closeDriver_, nullptr))
            closeDriver();
        RegionOwner::close();
    }

private:
    std::function<void()> closeDriver_;
};

} // namespace baton::python
