#include "baton/ckpt/interval.hpp"

#include <gtest/gtest.h>

#include <stdexcept>

using namespace baton::ckpt;

namespace {

Profile hostProfile(double ti, double tw, double tc, double ts)
{
    Profile profile;
    profile.iterationSeconds = ti;
    profile.updateSeconds = tw;
    profile.hostSnapshotSeconds = tc;
    profile.gpuSnapshotSeconds = tc / 10;
    profile.persistSeconds = ts;
    profile.checkpointBytes = 1 << 30;
    return profile;
}

} // namespace

TEST(OverheadPercent, DividesByTheWholeProduct)
{
    // stall 1 s every 10 iterations of 2 s: 1 / (10 · 2) · 100 = 5 %.
    EXPECT_DOUBLE_EQ(overheadPercent(1.0, 10, 2.0), 5.0);
    // CheckFreq's o/k*t*100 evaluates (1/10)·2·100 = 20 % for the same numbers.
    const double checkFreqPrecedence = 1.0 / 10 * 2.0 * 100;
    EXPECT_DOUBLE_EQ(checkFreqPrecedence, 20.0);
    EXPECT_NE(overheadPercent(1.0, 10, 2.0), checkFreqPrecedence);
}

TEST(ChooseInterval, PrecedenceCaseGivesTenNotForty)
{
    // Measured stall 1 s, Ti = 2 s, p = 5 %: the right formula needs k = 10; the precedence mistake
    // (o/k·t·100 <= p  <=>  k >= o·t·100/p) would demand k = 40.
    Profile profile = hostProfile(2.0, 0.2, 1.0, 0.5);
    profile.stallSeconds = 1.0;
    const IntervalChoice choice = chooseInterval(profile, 5.0);
    EXPECT_EQ(choice.interval, 10u);
    EXPECT_DOUBLE_EQ(choice.overheadPercent, 5.0);
}

TEST(ChooseInterval, EstimatesStallFromTheOverlap)
{
    // Snapshot 0.5 s overlaps the next forward+backward (Ti − Tw = 0.3 s): stall 0.2 s.
    // 0.2 / (k · 0.4) · 100 <= 5  =>  k >= 10.
    const IntervalChoice choice = chooseInterval(hostProfile(0.4, 0.1, 0.5, 0.1), 5.0);
    EXPECT_EQ(choice.target, SnapshotTarget::Host);
    EXPECT_NEAR(choice.stallSeconds, 0.2, 1e-12);
    EXPECT_EQ(choice.interval, 10u);
    // p = 3.5 %: 0.2 / (0.4 · 0.035) = 14.29  =>  k = 15.
    EXPECT_EQ(chooseInterval(hostProfile(0.4, 0.1, 0.5, 0.1), 3.5).interval, 15u);
}

TEST(ChooseInterval, SnapshotHiddenByComputeNeedsOnlyThePersistBound)
{
    // Snapshot 0.1 s fits under 0.3 s of compute: no stall; persist 2.5 s needs k >= 2.5 / 0.4 = 6.25.
    const IntervalChoice choice = chooseInterval(hostProfile(0.4, 0.1, 0.1, 2.5), 5.0);
    EXPECT_DOUBLE_EQ(choice.stallSeconds, 0.0);
    EXPECT_EQ(choice.interval, 7u);
    EXPECT_EQ(choice.reason, "persist must finish within k iterations");
    EXPECT_EQ(chooseInterval(hostProfile(0.4, 0.1, 0.1, 0.0), 5.0).interval, 1u);
}

TEST(ChooseInterval, ExactBoundariesAreInclusive)
{
    // Persist exactly 3 iterations: k = 3 (Ts <= k · Ti holds with equality).
    EXPECT_EQ(chooseInterval(hostProfile(0.1, 0.0, 0.0, 0.3), 5.0).interval, 3u);
    // Stall 0.3 s, Ti 0.1 s, p 5 %: 0.3 / (k · 0.1) · 100 <= 5  =>  k = 60 exactly.
    Profile profile = hostProfile(0.1, 0.0, 0.0, 0.0);
    profile.stallSeconds = 0.3;
    EXPECT_EQ(chooseInterval(profile, 5.0).interval, 60u);
}

TEST(ChooseSnapshotTarget, DeviceOnlyWithRoomToSpare)
{
    Profile profile = hostProfile(1.0, 0.1, 2.0, 1.0);
    profile.deviceTotalBytes = 80ull << 30;
    profile.devicePeakBytes = 60ull << 30;
    profile.checkpointBytes = 10ull << 30;
    // Spare 20 GiB >= 10 GiB + 10 % of 80 GiB = 18 GiB.
    EXPECT_EQ(chooseSnapshotTarget(profile), SnapshotTarget::Device);
    profile.checkpointBytes = 13ull << 30; // 21 GiB needed
    EXPECT_EQ(chooseSnapshotTarget(profile), SnapshotTarget::Host);
    profile.deviceTotalBytes = 0;
    EXPECT_EQ(chooseSnapshotTarget(profile), SnapshotTarget::Host);
}

TEST(ChooseInterval, DeviceSnapshotUsesTg)
{
    Profile profile = hostProfile(0.4, 0.1, 1.3, 0.1); // Tc 1.3 s, Tg 0.13 s
    profile.deviceTotalBytes = 80ull << 30;
    profile.devicePeakBytes = 10ull << 30;
    const IntervalChoice choice = chooseInterval(profile, 5.0);
    EXPECT_EQ(choice.target, SnapshotTarget::Device);
    EXPECT_DOUBLE_EQ(choice.stallSeconds, 0.0);
}

TEST(ChooseInterval, RejectsBadInput)
{
    EXPECT_THROW(chooseInterval(hostProfile(0.0, 0, 1, 1), 5.0), std::invalid_argument);
    EXPECT_THROW(chooseInterval(hostProfile(1.0, 0, 1, 1), 0.0), std::invalid_argument);
    EXPECT_THROW(chooseInterval(hostProfile(1.0, 0, 1, -1), 5.0), std::invalid_argument);
}

TEST(SmallestIntervalWithin, SettlesRounding)
{
    EXPECT_EQ(smallestIntervalWithin(0.0, 5.0), 1u);
    EXPECT_EQ(smallestIntervalWithin(50.0, 5.0), 10u);
    EXPECT_EQ(smallestIntervalWithin(50.000001, 5.0), 11u);
    for (int k = 1; k < 2000; ++k) {
        const double value = 0.07 * k; // values whose quotient rounds badly
        const auto found = smallestIntervalWithin(value, 0.07);
        EXPECT_LE(value / static_cast<double>(found), 0.07);
        if (found > 1) {
            EXPECT_GT(value / static_cast<double>(found - 1), 0.07);
        }
    }
}
