// The `handovers` table: each handover from a predecessor to its successor, by the predecessor's seq
// (`predecessor_seq`): when it was fenced, when the signal was delivered, when it completed.
#pragma once

#include "db/table_store.hpp"

#include <cstdint>
#include <optional>

namespace baton::service {

class HandoverStore : public db::TableStore {
public:
    using TableStore::TableStore;

    // signalledAt: the tick's clock (the queue snapshot's time), the same clock job end times come from.
    void start(std::int64_t chainId, int predecessorSeq, std::int64_t predecessor, std::int64_t successor,
        std::int64_t signalledAt);
    // Returns the seconds from the signal to `endTime`, if the handover was open.
    std::optional<double> complete(std::int64_t chainId, int predecessorSeq, std::int64_t endTime);
    // When the handover was fenced, and the signal as delivered: when scancel last succeeded (nullopt:
    // never yet) and how often.
    struct Signal {
        std::optional<std::int64_t> signalledAt;
        std::optional<std::int64_t> sentAt;
        int attempts = 0;
    };
    Signal signal(std::int64_t chainId, int predecessorSeq);
    void recordSignal(std::int64_t chainId, int predecessorSeq, std::int64_t sentAt);
};

} // namespace baton::service
