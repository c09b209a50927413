#include "tensor_box.hpp"

#include <algorithm>
#include <limits>

#include "baton/ckpt/checkpointer.hpp"
#include "baton/ckpt/error.hpp"

namespace baton::ckpt {

namespace {

std::uint64_t multiplied(std::uint64_t a, std::uint64_t b)
{
    if (b != 0 && a > std::numeric_limits<std::uint64_t>::max() / b)
        throw Error("tensor piece: its size overflows 64 bits");
    return a * b;
}

// Row-major strides of `lengths`: the bytes one step along each dimension skips.
std::vector<std::uint64_t> strides(const std::vector<std::uint64_t>& lengths)
{
    std::vector<std::uint64_t> result(lengths.size(), 1);
    for (std::size_t i = lengths.size(); i-- > 1;)
        result[i - 1] = result[i] * lengths[i];
    return result;
}

// The intersection of two boxes of one shape; false when it is empty.
bool intersect(const TensorBox& a, const TensorBox& b, TensorBox& out)
{
    const std::size_t n = a.offset.size();
    out.offset.resize(n);
    out.length.resize(n);
    for (std::size_t i = 0; i < n; ++i) {
        const std::uint64_t begin = std::max(a.offset[i], b.offset[i]);
        const std::uint64_t end = std::min(a.offset[i] + a.length[i], b.offset[i] + b.length[i]);
        if (begin >= end)
            return false;
        out.offset[i] = begin;
        out.length[i] = end - begin;
    }
    return true;
}

} // namespace

std::uint64_t volume(const std::vector<std::uint64_t>& lengths)
{
    std::uint64_t result = 1;
    for (auto length : lengths)
        result = multiplied(result, length);
    return result;
}

std::string shapeText(const std::vector<std::uint64_t>& shape)
{
    std::string text = "[";
    for (std::size_t i = 0; i < shape.size(); ++i)
        text += (i ? ", " : "") + std::to_string(shape[i]);
    return text + "]";
}

PieceGeometry tensorPiece(const std::vector<std::uint64_t>& shape, std::uint64_t elementSize,
    const TensorBox& box, std::uint64_t first, std::uint64_t count)
{
    if (shape.size() > kMaxTensorDims)
        throw Error("tensor piece: " + std::to_string(shape.size()) + " dimensions, at most "
            + std::to_string(kMaxTensorDims));
    if (box.offset.size() != shape.size() || box.length.size() != shape.size())
        throw Error("tensor piece: a box of " + std::to_string(box.offset.size()) + " dimensions in a tensor of "
            + std::to_string(shape.size()));
    if (elementSize == 0)
        throw Error("tensor piece: element size 0");
    for (std::size_t i = 0; i < shape.size(); ++i) {
        if (box.offset[i] > shape[i] || box.length[i] > shape[i] - box.offset[i])
            throw Error("tensor piece: its box leaves the shape " + shapeText(shape) + " in dimension "
                + std::to_string(i));
    }
    const std::uint64_t boxElements = volume(box.length);
    (void)multiplied(volume(shape), elementSize);
    if (first > boxElements || count > boxElements - first)
        throw Error("tensor piece: elements [" + std::to_string(first) + ", +" + std::to_string(count)
            + ") outside its box of " + std::to_string(boxElements));
    PieceGeometry piece;
    piece.tensorShape = shape;
    piece.elementSize = elementSize;
    // A tensor of no dimensions is one element: a shape of one dimension of length 1.
    piece.shape = shape.empty() ? std::vector<std::uint64_t> { 1 } : shape;
    piece.box = shape.empty() ? TensorBox { { 0 }, { 1 } } : box;
    piece.shape.back() *= elementSize;
    piece.box.offset.back() *= elementSize;
    piece.box.length.back() *= elementSize;
    piece.first = first * elementSize;
    piece.count = count * elementSize;
    return piece;
}

std::uint64_t stridedSpan(const std::vector<std::uint64_t>& lengths, const std::vector<std::uint64_t>& strides)
{
    std::uint64_t last = 0;
    for (std::size_t i = 0; i < lengths.size(); ++i) {
        if (lengths[i] == 0)
            return 0;
        last += multiplied(lengths[i] - 1, strides[i]);
    }
    return last + 1;
}

PieceGeometry stridedPiece(const std::vector<std::uint64_t>& shape, std::uint64_t elementSize, const TensorBox& box,
    const std::vector<std::uint64_t>& strides)
{
    if (strides.size() != shape.size() || shape.empty() || strides.back() != 1)
        throw Error("tensor piece: strides " + shapeText(strides) + " for a box of " + std::to_string(shape.size())
            + " dimensions (the last must be 1)");
    PieceGeometry piece = tensorPiece(shape, elementSize, box, 0, volume(box.length));
    for (std::size_t i = 0; i + 1 < strides.size(); ++i) {
        // Rows must not overlap: each stride spans at least the dimensions inside it.
        if (box.length[i] > 1 && strides[i] < stridedSpan({ box.length.begin() + static_cast<std::ptrdiff_t>(i) + 1, box.length.end() },
                                     { strides.begin() + static_cast<std::ptrdiff_t>(i) + 1, strides.end() }))
            throw Error("tensor piece: strides " + shapeText(strides) + " overlap for the box " + shapeText(box.length));
        piece.strides.push_back(multiplied(strides[i], elementSize));
    }
    piece.strides.push_back(1);
    (void)multiplied(stridedSpan(box.length, strides), elementSize);
    return piece;
}

PieceGeometry flatPiece(std::uint64_t globalBytes, std::uint64_t at, std::uint64_t size)
{
    if (at > globalBytes || size > globalBytes - at)
        throw Error("flat piece: bytes [" + std::to_string(at) + ", +" + std::to_string(size) + ") outside "
            + std::to_string(globalBytes));
    PieceGeometry piece;
    piece.shape = { globalBytes };
    piece.box = { { 0 }, { globalBytes } };
    piece.first = at;
    piece.count = size;
    return piece;
}

PieceGeometry inShapeOf(const PieceGeometry& flat, const PieceGeometry& tensor)
{
    PieceGeometry piece = flat;
    piece.shape = tensor.shape;
    piece.box = { std::vector<std::uint64_t>(tensor.shape.size(), 0), tensor.shape };
    return piece;
}

// Greedy: at each position take the largest block of whole rows (of the trailing dimensions) that starts
// there and stays inside the current index of the leading ones.
std::vector<ContiguousBox> contiguousBoxes(const PieceGeometry& piece)
{
    if (!piece.strides.empty())
        return piece.count == 0 ? std::vector<ContiguousBox> {} : std::vector<ContiguousBox> { { piece.box, 0, piece.strides } };
    const auto& lengths = piece.box.length;
    const std::size_t n = lengths.size();
    const auto stride = strides(lengths);
    std::vector<ContiguousBox> boxes;
    std::uint64_t at = piece.first;
    const std::uint64_t end = piece.first + piece.count;
    while (at < end) {
        std::size_t dim = 0;
        while (at % stride[dim] != 0 || stride[dim] > end - at)
            ++dim; // the last dimension's stride is 1: the loop ends there at the latest
        ContiguousBox part;
        part.start = at - piece.first;
        part.box.offset.resize(n);
        part.box.length.resize(n);
        for (std::size_t i = 0; i < n; ++i) {
            const std::uint64_t index = at / stride[i] % lengths[i];
            if (i < dim) {
                part.box.offset[i] = piece.box.offset[i] + index;
                part.box.length[i] = 1;
            } else if (i == dim) {
                part.box.offset[i] = piece.box.offset[i] + index;
                part.box.length[i] = std::min(lengths[i] - index, (end - at) / stride[i]);
            } else {
                part.box.offset[i] = piece.box.offset[i];
                part.box.length[i] = lengths[i];
            }
        }
        at += part.box.length[dim] * stride[dim];
        boxes.push_back(std::move(part));
    }
    return boxes;
}

std::vector<ByteCopy> overlapCopies(const std::vector<ContiguousBox>& source, const std::vector<ContiguousBox>& target)
{
    std::vector<ByteCopy> copies;
    TensorBox common;
    for (const auto& s : source) {
        const auto sourceStride = s.strides.empty() ? strides(s.box.length) : s.strides;
        for (const auto& t : target) {
            if (!intersect(s.box, t.box, common))
                continue;
            const auto targetStride = t.strides.empty() ? strides(t.box.length) : t.strides;
            const std::size_t n = common.offset.size();
            const std::uint64_t row = common.length[n - 1];
            // Walk the rows of the common box (every index of the leading dimensions, odometer order).
            std::vector<std::uint64_t> index(common.offset);
            while (true) {
                std::uint64_t from = s.start, to = t.start;
                for (std::size_t i = 0; i < n; ++i) {
                    from += (index[i] - s.box.offset[i]) * sourceStride[i];
                    to += (index[i] - t.box.offset[i]) * targetStride[i];
                }
                if (!copies.empty() && copies.back().from + copies.back().size == from
                    && copies.back().to + copies.back().size == to)
                    copies.back().size += row;
                else
                    copies.push_back({ from, to, row });
                bool done = true;
                for (std::size_t dim = n - 1; dim-- > 0;) {
                    if (++index[dim] < common.offset[dim] + common.length[dim]) {
                        done = false;
                        break;
                    }
                    index[dim] = common.offset[dim];
                }
                if (done)
                    break;
            }
        }
    }
    return copies;
}

PieceGeometry registeredPiece(const TensorPiece& piece, std::uint64_t size)
{
    const TensorBox box { piece.boxOffset, piece.boxLength };
    if (!piece.strides.empty())
        return stridedPiece(piece.shape, piece.elementSize, box, piece.strides);
    return tensorPiece(piece.shape, piece.elementSize, box, piece.first, size / piece.elementSize);
}

bool overlaps(const std::vector<ContiguousBox>& a, const std::vector<ContiguousBox>& b)
{
    TensorBox common;
    for (const auto& x : a) {
        for (const auto& y : b) {
            if (intersect(x.box, y.box, common))
                return true;
        }
    }
    return false;
}

} // namespace baton::ckpt
