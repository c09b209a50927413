// The sbatch options a chain may carry: tables of accepted and refused argument vectors, in every form
// getopt_long reads (--opt=value, --opt value, -o value, -ovalue, short flags clustered, abbreviations).
#include "slurm/sbatch_args.hpp"

#include <gtest/gtest.h>

#include <string>
#include <vector>

using namespace baton::slurm;

namespace {

using Args = std::vector<std::string>;

TEST(SbatchArgs, AcceptsWhatAChainMayCarry)
{
    const std::vector<Args> accepted {
        {}, { "--time=4:00:00", "--nodes=2" }, { "--time", "4:00:00", "--nodes", "2" },
        { "-t", "60", "-N", "2", "-n", "8", "-c", "4" }, { "-t60", "-N2" },
        { "--ntasks-per-node=4", "--cpus-per-task=8", "--mem=64G", "--mem-per-cpu=4000" },
        { "--gres=gpu:a100:4", "--gpus=4", "--gpus-per-node=4", "--gpus-per-task=1", "--gpus-per-socket=2" },
        { "--partition=gpu", "--account=proj", "--qos=normal", "-p", "gpu", "-A", "proj", "-q", "high" },
        { "--job-name=train resnet", "-J", "x", "--constraint=a100&ib", "-C", "v100" },
        { "--exclusive", "--exclusive=user", "--signal=B:USR1@120", "--no-requeue" },
        { "--output=/scratch/%u/job-%j.out", "-o", "out-%j", "--error=err-%j", "-e", "e" },
        { "--export=ALL,NCCL_DEBUG=INFO", "--mail-type=END,FAIL", "--mail-user=me@example.org" },
        { "--wait-all-nodes=1", "--time-min=30", "--reservation=maint", "--nice=10", "--nice" },
        { "-Qv", "-sO" }, // flags clustered
        { "-Qt", "60" }, // the last flag of a cluster takes the next argument as its value
        { "--baton-dir=/scratch/baton/me/train", "--baton-overhead", "5", "--baton-margin=60" },
        { "--job-name", "--wait" }, // getopt takes the next argument as the value, whatever it looks like
        { "-J", "-W" }, { "-t60W" }, // the rest of a cluster after -t is its value
    };
    for (const auto& args : accepted) {
        const auto refused = checkSbatchArgs(args);
        std::string line;
        for (const auto& a : args)
            line += a + " ";
        EXPECT_FALSE(refused.has_value()) << line << ": " << refused.value_or("");
    }
}

TEST(SbatchArgs, RefusesWhatWouldStallOrBreakTheChain)
{
    struct Case {
        Args args;
        std::string says; // a part of the message
    };
    const std::vector<Case> refused {
        // --wait in every form sbatch reads.
        { { "--wait" }, "--wait: sbatch would wait" },
        { { "-W" }, "--wait" },
        { { "-QW" }, "--wait" },
        { { "--wai" }, "an abbreviation (of --wait-all-nodes, --wait)" },
        { { "--wa" }, "abbreviation" },
        { { "--wait=1" }, "--wait" },
        { { "--time=5", "-W" }, "'-W'" },
        // Nothing submitted, or the output is not the job id.
        { { "--test-only" }, "no job" },
        { { "--test" }, "abbreviation (of --test-only)" },
        { { "--help" }, "no job" },
        { { "-h" }, "no job" },
        { { "--usage" }, "no job" },
        { { "--usa" }, "abbreviation" },
        { { "--version" }, "no job" },
        { { "-V" }, "no job" },
        { { "--parsable" }, "batond sets it" },
        { { "--pars" }, "abbreviation (of --parsable)" },
        // Another user, another script, batond's own options.
        { { "--uid=0" }, "run as its owner" },
        { { "--uid", "root" }, "run as its owner" },
        { { "--gid=0" }, "run as its owner" },
        { { "--get-user-env" }, "run as its owner" },
        { { "--comment=baton:1:2" }, "batond sets it itself (the job's key)" },
        { { "--comment", "x" }, "the job's key" },
        { { "--comm=x" }, "abbreviation (of --comment)" },
        { { "--wrap=rm -rf ~" }, "batch script" },
        { { "--wrap", "true" }, "batch script" },
        { { "--baton=other" }, "the chain's name" },
        { { "--baton-seq=3" }, "batond sets it itself (the job's seq)" },
        { { "--baton" }, "the chain's name" },
        // Timing and ordering are batond's.
        { { "--hold" }, "held" },
        { { "-H" }, "held" },
        { { "--dependency=afterok:1" }, "orders" },
        { { "-d", "singleton" }, "orders" },
        { { "--array=1-10" }, "array" },
        { { "--clusters=other" }, "own cluster" },
        { { "-M", "other" }, "own cluster" },
        // Not on the list, not sbatch's, not an option.
        { { "--requeue" }, "not among the sbatch options a chain may carry" },
        { { "--no-such-option" }, "not among" },
        { { "-Z" }, "-Z is not among" },
        { { "job.sh" }, "not an option" },
        { { "--time=5", "job.sh" }, "'job.sh' is not an option" },
        { { "-" }, "not an option" },
        { { "" }, "not an option" },
        { { "--" }, "'--'" },
        { { "--", "--wait" }, "'--'" },
        // Shapes getopt would refuse or misread.
        { { "--time" }, "needs a value" },
        { { "-t" }, "needs a value" },
        { { "-Qt" }, "needs a value" },
        { { "--contiguous=yes" }, "takes no value" },
        { { std::string("--job-name=a\0b", 14) }, "NUL" },
    };
    for (const auto& c : refused) {
        std::string line;
        for (const auto& a : c.args)
            line += a + " ";
        const auto message = checkSbatchArgs(c.args);
        ASSERT_TRUE(message.has_value()) << line << "was accepted";
        EXPECT_NE(message->find(c.says), std::string::npos) << line << ": " << *message;
    }
}

// At submission the arguments also hold batond's own --baton=CHAIN, once; a second one is the chain's.
TEST(SbatchArgs, BatondsChainOptionOnceAtSubmission)
{
    EXPECT_FALSE(checkSbatchArgs({ "--baton=train", "--time=5" }, ChainOption::AllowedOnce));
    EXPECT_TRUE(checkSbatchArgs({ "--baton=train", "--baton=other" }, ChainOption::AllowedOnce));
    EXPECT_TRUE(checkSbatchArgs({ "--baton=train", "--wait" }, ChainOption::AllowedOnce));
    EXPECT_TRUE(checkSbatchArgs({ "--baton=train" }));
}

// sbatch obeys the script's own #SBATCH (and #SLURM) lines too, up to its first command: a --wait there would block
// every submission of the chain as surely as one on the command line.
TEST(SbatchArgs, ScriptDirectivesThatWouldWaitOrSubmitNothing)
{
    const std::vector<std::string> accepted {
        "", "#!/bin/bash\n#SBATCH --time=60 --nodes=2\n#SBATCH -J train\nsrun python train.py\n",
        "#!/bin/bash\n#SBATCH --wait-all-nodes=1\n#SBATCH --comment=mine --requeue --array=1-3\n",
        "#!/bin/bash\n#SBATCH --job-name -W\n#SBATCH -J '--wait'\n", // values, not options
        "#!/bin/bash\n#SBATCH --time=5 # --wait in a comment\n",
        "#!/bin/bash\necho start\n#SBATCH --wait\n", // after the first command: not read by sbatch
        "#!/bin/bash\n# SBATCH --wait\n#sbatch --wait\n #SLURM --wait\n", // not directives
        "#!/bin/bash\n#SBATCH -J \\--wait --time=5\\ #\n", // a value, and an escaped blank
    };
    for (const auto& script : accepted) {
        const auto refused = checkScriptDirectives(script);
        EXPECT_FALSE(refused.has_value()) << script << ": " << refused.value_or("");
    }
    const std::vector<std::pair<std::string, std::string>> refused {
        { "#!/bin/bash\n#SBATCH --wait\nsrun x\n", "--wait: sbatch would wait" },
        { "#!/bin/bash\n#SBATCH -W\n", "--wait" },
        { "#!/bin/bash\n#SBATCH -QW\n", "--wait" },
        { "#!/bin/bash\n#SBATCH --time=5 --wai\n", "'--wai'" },
        { "#!/bin/bash\n\n# a comment\n   \n#SBATCH \"--wait\"\n", "--wait" },
        { "#!/bin/bash\r\n#SBATCH --wait\r\n", "--wait" },
        { "#!/bin/bash\n#SBATCH --test-only\n", "no job" },
        { "#!/bin/bash\n#SBATCH --test\n", "--test-only" },
        { "#!/bin/bash\n#SBATCH -h\n", "--help" },
        { "#!/bin/bash\n#SBATCH --usage\n", "--usage" },
        { "#!/bin/bash\n#SBATCH -V\n", "--version" },
        // The deprecated magic word, which sbatch still obeys.
        { "#!/bin/bash\n#SLURM --wait\n", "--wait" },
        { "#!/bin/bash\n#SBATCH --time=5\n#SLURM -W\n", "--wait" },
        // sbatch drops a backslash and takes the next character as it is, inside quotes too.
        { "#!/bin/bash\n#SBATCH --wa\\it\n", "--wait" },
        { "#!/bin/bash\n#SBATCH -\\W\n", "--wait" },
        { "#!/bin/bash\n#SBATCH \"--te\\st-only\"\n", "--test-only" },
        { "#!/bin/bash\n#SBATCH --time=5 \\# --wait\n", "--wait" }, // an escaped '#' is no comment
    };
    for (const auto& [script, says] : refused) {
        const auto message = checkScriptDirectives(script);
        ASSERT_TRUE(message.has_value()) << script << "was accepted";
        EXPECT_NE(message->find(says), std::string::npos) << script << ": " << *message;
    }
}

} // namespace
