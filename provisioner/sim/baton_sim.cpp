// Stand-alone front end for the simulator's command group (the same as `batonctl sim ...`).
#include "sim_command.hpp"

#include <string>
#include <vector>

int main(int argc, char** argv)
{
    std::vector<std::string> args(argv + 1, argv + argc);
    return baton::sim::runSimCommand(args);
}
