#include "svg_plot.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <sstream>

namespace baton::sim {

namespace {

std::string escape(const std::string& s)
{
    std::string out;
    for (char c : s) {
        switch (c) {
        case '&':
            out += "&amp;";
            break;
        case '<':
            out += "&lt;";
            break;
        case '>':
            out += "&gt;";
            break;
        case '"':
            out += "&quot;";
            break;
        default:
            out += c;
        }
    }
    return out;
}

std::string num(double v)
{
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.1f", v);
    return buf;
}

} // namespace

std::string cdfSvg(const std::vector<CdfSeries>& series, const std::string& title, const std::string& xLabel,
    double xMin, double xMax)
{
    constexpr double width = 760, height = 440, left = 70, right = 180, top = 40, bottom = 60;
    constexpr double plotW = width - left - right, plotH = height - top - bottom;
    constexpr std::array<const char*, 8> colours
        = { "#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#e377c2", "#7f7f7f" };
    auto px = [&](double x) { return left + (std::clamp(x, xMin, xMax) - xMin) / (xMax - xMin) * plotW; };
    auto py = [&](double y) { return top + (1.0 - y) * plotH; };

    std::ostringstream svg;
    svg << R"(<svg xmlns="http://www.w3.org/2000/svg" width=")" << width << R"(" height=")" << height
        << R"(" font-family="sans-serif" font-size="12">)" << '\n';
    svg << R"(<rect width="100%" height="100%" fill="white"/>)" << '\n';
    svg << R"(<text x=")" << num(width / 2) << R"(" y="22" text-anchor="middle" font-size="15">)"
        << escape(title) << "</text>\n";
    // Grid and axes.
    for (int i = 0; i <= 10; ++i) {
        const double y = py(i / 10.0);
        svg << R"(<line x1=")" << num(left) << R"(" y1=")" << num(y) << R"(" x2=")" << num(left + plotW)
            << R"(" y2=")" << num(y) << R"(" stroke="#e0e0e0"/>)" << '\n';
        svg << R"(<text x=")" << num(left - 6) << R"(" y=")" << num(y + 4) << R"(" text-anchor="end">)"
            << num(i / 10.0) << "</text>\n";
    }
    const int xTicks = 8;
    for (int i = 0; i <= xTicks; ++i) {
        const double xv = xMin + (xMax - xMin) * i / xTicks;
        const double x = px(xv);
        svg << R"(<line x1=")" << num(x) << R"(" y1=")" << num(top) << R"(" x2=")" << num(x) << R"(" y2=")"
            << num(top + plotH) << R"(" stroke=")" << (xv == 0 ? "#909090" : "#e0e0e0") << R"("/>)" << '\n';
        svg << R"(<text x=")" << num(x) << R"(" y=")" << num(top + plotH + 18) << R"(" text-anchor="middle">)"
            << num(xv) << "</text>\n";
    }
    svg << R"(<rect x=")" << num(left) << R"(" y=")" << num(top) << R"(" width=")" << num(plotW)
        << R"(" height=")" << num(plotH) << R"(" fill="none" stroke="black"/>)" << '\n';
    svg << R"(<text x=")" << num(left + plotW / 2) << R"(" y=")" << num(height - 14)
        << R"(" text-anchor="middle">)" << escape(xLabel) << " (clipped to [" << num(xMin) << ", "
        << num(xMax) << "])</text>\n";
    svg << R"svg(<text transform="translate(18 )svg" << num(top + plotH / 2)
        << R"svg() rotate(-90)" text-anchor="middle">fraction of probes &#8804; x</text>)svg" << '\n';

    for (std::size_t s = 0; s < series.size(); ++s) {
        auto v = series[s].values;
        std::sort(v.begin(), v.end());
        const char* colour = colours[s % colours.size()];
        std::ostringstream pts;
        pts << num(px(xMin)) << ',' << num(py(0));
        const auto n = static_cast<double>(v.size());
        for (std::size_t i = 0; i < v.size(); ++i) {
            const double x = px(v[i]);
            pts << ' ' << num(x) << ',' << num(py(i / n)) << ' ' << num(x) << ',' << num(py((i + 1) / n));
        }
        pts << ' ' << num(px(xMax)) << ',' << num(py(v.empty() ? 0 : 1));
        svg << R"(<polyline fill="none" stroke-width="2" stroke=")" << colour << R"(" points=")" << pts.str()
            << R"("/>)" << '\n';
        const double ly = top + 14 + 20 * static_cast<double>(s);
        svg << R"(<line x1=")" << num(left + plotW + 12) << R"(" y1=")" << num(ly) << R"(" x2=")"
            << num(left + plotW + 36) << R"(" y2=")" << num(ly) << R"(" stroke-width="2" stroke=")" << colour
            << R"("/>)" << '\n';
        svg << R"(<text x=")" << num(left + plotW + 42) << R"(" y=")" << num(ly + 4) << R"(">)"
            << escape(series[s].label) << "</text>\n";
    }
    svg << "</svg>\n";
    return svg.str();
}

} // namespace baton::sim
