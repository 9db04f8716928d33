#pragma once
// Sets environment variables for one test and restores them after.
#include <cstdlib>
#include <map>
#include <optional>
#include <string>

namespace trlx::test {

class EnvGuard {
 public:
  EnvGuard() = default;
  ~EnvGuard() {
    for (const auto& [k, v] : saved_) {
      if (v)
        ::setenv(k.c_str(), v->c_str(), 1);
      else
        ::unsetenv(k.c_str());
    }
  }
  EnvGuard(const EnvGuard&) = delete;
  EnvGuard& operator=(const EnvGuard&) = delete;
  // Sets `name` (or unsets it for nullopt) until the guard goes.
  void set(const std::string& name, std::optional<std::string> value) {
    if (!saved_.count(name)) {
      const char* old = std::getenv(name.c_str());
      saved_[name] = old ? std::optional<std::string>(old) : std::nullopt;
    }
    if (value)
      ::setenv(name.c_str(), value->c_str(), 1);
    else
      ::unsetenv(name.c_str());
  }
  // A clean hub environment: nothing from the machine running the tests.
  void clear_hub() {
    for (const char* v :
         {"HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE", "HF_HOME", "XDG_CACHE_HOME", "HF_ENDPOINT",
          "HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "HF_TOKEN_PATH", "HF_HUB_OFFLINE"})
      set(v, std::nullopt);
  }

 private:
  std::map<std::string, std::optional<std::string>> saved_;
};

}  // namespace trlx::test
