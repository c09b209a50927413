// The geometry of tensor pieces (RegionLayout::Kind::Box, the manifest's layout "box"): which bytes of a
// saved piece land where in a registered one. A piece is `count` bytes, from byte `first` in row-major
// order, of a box (offset and length per dimension) of a tensor's global shape. Every shape here counts
// bytes along its last dimension (elements scaled by the element size), so that the pieces of a tensor
// and the flat byte ranges of the earlier layouts (replicated, sharded) meet in one geometry.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace baton::ckpt {

struct TensorBox {
    std::vector<std::uint64_t> offset, length;
};

struct PieceGeometry {
    std::vector<std::uint64_t> shape; // global, in bytes along the last dimension
    TensorBox box; // in the same units
    std::uint64_t first = 0, count = 0; // bytes of the box, in its row-major order
    // A whole box laid out with these byte strides instead of row-major (a shard that is a view into a
    // padded buffer: DTensor's uneven Shard(d) for d > 0); empty: row-major. The last one is 1.
    std::vector<std::uint64_t> strides;
    // What the shape was in elements, for comparing tensors and naming them in errors; empty for a flat
    // byte array (a region registered or saved without a tensor shape).
    std::vector<std::uint64_t> tensorShape;
    std::uint64_t elementSize = 1;
};

// The limit on dimensions a manifest or a caller may give (PyTorch's own is 64).
inline constexpr std::size_t kMaxTensorDims = 64;

// A tensor piece: `count` elements from element `first` of `box` of a tensor of `shape`, elements of
// `elementSize` bytes. A tensor of no dimensions is one of one element. Throws Error when the box lies
// outside the shape, the elements outside the box, or the sizes overflow.
PieceGeometry tensorPiece(const std::vector<std::uint64_t>& shape, std::uint64_t elementSize,
    const TensorBox& box, std::uint64_t first, std::uint64_t count);
// A whole box whose elements lie at `strides` (in elements, the last 1) from its first one.
PieceGeometry stridedPiece(const std::vector<std::uint64_t>& shape, std::uint64_t elementSize, const TensorBox& box,
    const std::vector<std::uint64_t>& strides);
// The elements a strided box spans in memory, from its first to its last (0 for an empty box).
std::uint64_t stridedSpan(const std::vector<std::uint64_t>& lengths, const std::vector<std::uint64_t>& strides);
// Bytes [at, at + size) of a flat array of `globalBytes` bytes.
PieceGeometry flatPiece(std::uint64_t globalBytes, std::uint64_t at, std::uint64_t size);
// A flat piece seen in the byte shape of a tensor of as many bytes (the row-major order is the same).
PieceGeometry inShapeOf(const PieceGeometry& flat, const PieceGeometry& tensor);

std::uint64_t volume(const std::vector<std::uint64_t>& lengths);

// A box whose bytes lie inside a piece from byte `start` of it, in its own row-major order or, where
// `strides` is set, at those byte strides.
struct ContiguousBox {
    TensorBox box;
    std::uint64_t start = 0;
    std::vector<std::uint64_t> strides; // empty: row-major
};
// The piece as at most 2 · dimensions - 1 such boxes, in order (a strided piece: one).
std::vector<ContiguousBox> contiguousBoxes(const PieceGeometry& piece);

struct ByteCopy {
    std::uint64_t from = 0, to = 0, size = 0; // from the source piece's first byte, to the target's
};
// The copies that bring every byte both pieces hold from `source` to `target`, adjacent ones merged.
std::vector<ByteCopy> overlapCopies(const std::vector<ContiguousBox>& source, const std::vector<ContiguousBox>& target);
// Whether the two pieces share a byte.
bool overlaps(const std::vector<ContiguousBox>& a, const std::vector<ContiguousBox>& b);

std::string shapeText(const std::vector<std::uint64_t>& shape); // "[4, 6]"

struct ManifestEntry;
struct TensorPiece;
// The piece a manifest entry of layout "box" holds; the piece any region entry holds (the flat layouts:
// bytes of an array); and the one a region of `size` bytes registered as `piece` holds.
PieceGeometry entryPiece(const ManifestEntry& entry);
PieceGeometry savedPiece(const ManifestEntry& entry);
PieceGeometry registeredPiece(const TensorPiece& piece, std::uint64_t size);

} // namespace baton::ckpt
