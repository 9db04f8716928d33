// The Catch2 main of every test executable, with one guard: ctest runs each
// test case by its name, and test discovery (CatchAddTests.cmake) splits the
// names it lists at ';' (a CMake list separator), so a name with ';' becomes
// two ctest tests that match no test case. Any run of an executable holding
// such a name fails, naming it (listing still works, so discovery does too).
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>

#include <iostream>

int main(int argc, char* argv[]) {
  Catch::Session session;
  if (const int rc = session.applyCommandLine(argc, argv); rc != 0) return rc;
  const auto& config = session.configData();
  if (!config.listTests && !config.listTestNamesOnly && !config.listTags && !config.listReporters) {
    int bad = 0;
    for (const auto& test : Catch::getRegistryHub().getTestCaseRegistry().getAllTests())
      if (test.getTestCaseInfo().name.find(';') != std::string::npos) {
        std::cerr << "test case name contains ';', which ctest cannot run by name (rename it): \""
                  << test.getTestCaseInfo().name << "\"\n";
        ++bad;
      }
    if (bad) return 1;
  }
  return session.run();
}
