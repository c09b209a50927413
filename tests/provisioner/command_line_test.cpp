// batonctl's option framework: parsing, the errors it reports and the help it writes from the declarations.
#include "cli/command_line.hpp"

#include <gtest/gtest.h>

#include <string>
#include <vector>

using baton::ctl::CommandSpec;
using baton::ctl::UsageError;

namespace {

CommandSpec exampleSpec()
{
    CommandSpec spec("batonctl example", "An example command.");
    spec.argument("INPUT", "what to read")
        .optionalArgument("OUTPUT", "where to write")
        .trailing("EXTRA", "passed on untouched")
        .option("format", "FORMAT", "csv|json", "csv")
        .option("limit", "N", "at most N rows")
        .option("shapes", "N,N", "node counts", "1,8")
        .flag("verbose", "say more")
        .note("example: batonctl example in.txt");
    return spec;
}

baton::ctl::ParsedCommand parse(const CommandSpec& spec, std::vector<std::string> args)
{
    return spec.parse(args);
}

std::string usageMessage(const CommandSpec& spec, std::vector<std::string> args)
{
    try {
        spec.parse(args);
    } catch (const UsageError& error) {
        EXPECT_EQ(error.command(), spec.path());
        return error.what();
    }
    ADD_FAILURE() << "no usage error for " << testing::PrintToString(args);
    return {};
}

} // namespace

TEST(CommandLine, HelpIsGeneratedFromTheDeclarations)
{
    const auto help = exampleSpec().help();
    EXPECT_NE(help.find("usage: batonctl example [options] INPUT [OUTPUT] [-- EXTRA...]"), std::string::npos)
        << help;
    EXPECT_NE(help.find("An example command."), std::string::npos);
    EXPECT_NE(help.find("  INPUT                     what to read\n"), std::string::npos) << help;
    EXPECT_NE(help.find("  -- EXTRA...               passed on untouched\n"), std::string::npos) << help;
    EXPECT_NE(help.find("  --format FORMAT           csv|json (default csv)\n"), std::string::npos) << help;
    EXPECT_NE(help.find("  --limit N                 at most N rows\n"), std::string::npos) << help;
    EXPECT_NE(help.find("  --verbose                 say more\n"), std::string::npos) << help;
    EXPECT_NE(help.find("  -h, --help                print this help\n"), std::string::npos) << help;
    EXPECT_NE(help.find("\nexample: batonctl example in.txt\n"), std::string::npos) << help;
}

TEST(CommandLine, LongNamesAndMultiLineHelpAreAligned)
{
    CommandSpec spec("batonctl x", "");
    spec.option("a-very-long-option-name", "VALUE", "first line\nsecond line");
    const auto help = spec.help();
    EXPECT_NE(help.find("  --a-very-long-option-name VALUE\n" + std::string(28, ' ') + "first line\n"
                  + std::string(28, ' ') + "second line\n"),
        std::string::npos)
        << help;
}

TEST(CommandLine, ParsesOptionsArgumentsAndDefaults)
{
    const auto spec = exampleSpec();
    const auto parsed = parse(spec, { "--limit", "5", "in.txt", "--verbose", "--format=json", "out.txt" });
    EXPECT_FALSE(parsed.helpRequested());
    EXPECT_EQ(parsed.argument("INPUT"), "in.txt");
    EXPECT_EQ(parsed.argument("OUTPUT"), "out.txt");
    EXPECT_EQ(parsed.text("format"), "json");
    EXPECT_EQ(parsed.integer("limit"), 5);
    EXPECT_TRUE(parsed.flag("verbose"));
    EXPECT_TRUE(parsed.trailing().empty());

    const auto defaults = parse(spec, { "in.txt" });
    EXPECT_EQ(defaults.text("format"), "csv"); // the declared default
    EXPECT_FALSE(defaults.has("format")); // ... which does not count as given
    EXPECT_FALSE(defaults.value("limit"));
    EXPECT_EQ(defaults.integer("limit", 42), 42);
    EXPECT_EQ(defaults.positiveIntegers("shapes"), (std::vector<int> { 1, 8 }));
    EXPECT_FALSE(defaults.flag("verbose"));
    EXPECT_EQ(defaults.argument("OUTPUT"), "");
}

TEST(CommandLine, DoubleDashEndsTheOptions)
{
    const auto spec = exampleSpec();
    const auto parsed = parse(spec, { "in.txt", "--", "--time=1:00", "-N", "2", "--verbose" });
    EXPECT_EQ(parsed.arguments(), (std::vector<std::string> { "in.txt" }));
    EXPECT_EQ(parsed.trailing(), (std::vector<std::string> { "--time=1:00", "-N", "2", "--verbose" }));
    EXPECT_FALSE(parsed.flag("verbose"));

    // Without a trailing declaration, words after `--` are arguments, even ones that look like options.
    CommandSpec plain("batonctl plain", "");
    plain.argument("NAME", "a name");
    EXPECT_EQ(parse(plain, { "--", "--odd-name" }).argument("NAME"), "--odd-name");
}

TEST(CommandLine, AValueMayStartWithADash)
{
    const auto spec = exampleSpec();
    EXPECT_EQ(parse(spec, { "in.txt", "--limit", "-5" }).integer("limit"), -5);
    EXPECT_EQ(parse(spec, { "-" }).argument("INPUT"), "-");
}

TEST(CommandLine, BadCommandLinesAreUsageErrors)
{
    const auto spec = exampleSpec();
    EXPECT_EQ(usageMessage(spec, { "in.txt", "--colour", "red" }), "unknown option --colour");
    EXPECT_EQ(usageMessage(spec, { "in.txt", "-x" }), "unknown option -x");
    EXPECT_EQ(usageMessage(spec, { "in.txt", "--limit" }), "option --limit needs a value (N)");
    EXPECT_EQ(usageMessage(spec, { "in.txt", "--verbose=yes" }), "option --verbose takes no value");
    EXPECT_EQ(usageMessage(spec, {}),
        "missing INPUT; usage: batonctl example [options] INPUT [OUTPUT] [-- EXTRA...]");
    EXPECT_EQ(usageMessage(spec, { "a", "b", "c" }).rfind("unexpected argument 'c'", 0), 0u);

    const auto parsed = parse(spec, { "in.txt", "--limit", "many", "--shapes", "1,0" });
    EXPECT_THROW(parsed.integer("limit"), UsageError);
    EXPECT_THROW(parsed.number("limit"), UsageError);
    EXPECT_THROW(parsed.positiveIntegers("shapes"), UsageError);
    // Asking for an undeclared option is a bug in the command, not a usage error.
    EXPECT_THROW(parsed.text("undeclared"), std::logic_error);
}

TEST(CommandLine, HelpIsAcceptedAnywhereAndSkipsTheArgumentCheck)
{
    const auto spec = exampleSpec();
    EXPECT_TRUE(parse(spec, { "--help" }).helpRequested());
    EXPECT_TRUE(parse(spec, { "a", "b", "c", "-h" }).helpRequested());
    EXPECT_FALSE(parse(spec, { "in.txt", "--", "--help" }).helpRequested());
}
