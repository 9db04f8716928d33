// Hub names in a resolved config: found in (or fetched into) the Hugging Face cache and replaced by local paths.
#include "config/hub_paths.hpp"

#include <mutex>
#include <variant>

#include "config/loader.hpp"
#include "core/error.hpp"
#include "core/log.hpp"
#include "io/hub.hpp"

namespace trlx::config {

namespace fs = std::filesystem;

namespace {

std::string where(const ConfigLoader* loader, const std::string& field) {
  return loader ? loader->where(field) : "`" + field + "`";
}

// A value that can only be a local path: absolute, ./ ../ ~ or a Windows-ish drive.
bool path_shaped(const std::string& v) {
  return v.empty() || v.front() == '/' || v.front() == '.' || v.front() == '~' ||
         v.find('\\') != std::string::npos;
}

// Every snapshot resolved in this process, for hub_origin.
std::mutex origins_mutex;
std::vector<HubResolution>& origins() {
  static std::vector<HubResolution> all;
  return all;
}

// Adds a resolution for hub_origin once (an adapter's base is resolved by
// every command step that starts from the adapter).
void remember(const HubResolution& r) {
  std::lock_guard<std::mutex> lock(origins_mutex);
  for (const auto& o : origins())
    if (o.snapshot == r.snapshot && o.name == r.name && o.revision == r.revision) return;
  origins().push_back(r);
}

}  // namespace

std::optional<HubResolution> hub_origin(const std::filesystem::path& snapshot) {
  std::lock_guard<std::mutex> lock(origins_mutex);
  std::error_code ec;
  const auto wanted = fs::weakly_canonical(snapshot, ec);
  for (const auto& r : origins())
    if (r.snapshot == snapshot || (!ec && fs::weakly_canonical(r.snapshot, ec) == wanted)) return r;
  // A snapshot this process did not resolve from a name (the base of an
  // adapter being continued, or a snapshot path given as is): the repo and
  // revision its place in the cache names.
  if (const auto repo = io::hub::repo_of_snapshot(snapshot))
    return HubResolution{"", repo->repo_id, repo->revision, snapshot, ""};
  return std::nullopt;
}

void remember_hub_origin(const std::string& name, const std::string& revision,
                         const std::filesystem::path& snapshot) {
  remember(HubResolution{"", name, revision, snapshot, ""});
}

std::vector<HubResolution> resolve_hub_paths(const Schema& schema, void* config, HubMode mode,
                                             const ConfigLoader* loader) {
  std::vector<HubResolution> out;
  const io::hub::HubOptions options = io::hub::HubOptions::from_env();
  for (const auto& f : schema.fields()) {
    if (f.hub == FieldSpec::HubRef::None || !f.read || f.kind != Kind::String) continue;
    const Value v = f.read(config);
    const auto* text = std::get_if<std::string>(&v);
    if (!text || text->empty()) continue;
    // The revision that goes with this field, when the schema names one.
    std::string revision = "main";
    bool revision_set = false;
    if (!f.hub_revision_field.empty()) {
      const FieldSpec* rf = schema.find(f.hub_revision_field);
      if (rf && rf->read) {
        const Value rv = rf->read(config);
        if (const auto* r = std::get_if<std::string>(&rv); r && !r->empty()) {
          revision = *r;
          // main is every repository's default branch: naming it with a
          // local path asks for nothing (TRL ignores it there too).
          revision_set = rv != rf->default_value && *r != "main";
        }
      }
    }
    std::error_code ec;
    if (fs::exists(*text, ec)) {
      if (revision_set)
        fail_input(
            "{} is set, but {} is a local path (`{}`), which has no revisions; remove {} or name "
            "the model "
            "by its hub name",
            where(loader, f.hub_revision_field), where(loader, f.name), *text,
            f.hub_revision_field);
      continue;
    }
    if (path_shaped(*text) || !io::hub::looks_like_repo_id(*text))
      continue;  // the reader's error says it is missing
    const io::hub::RepoRef ref{
        f.hub == FieldSpec::HubRef::Model ? io::hub::RepoType::Model : io::hub::RepoType::Dataset,
        *text, revision};
    HubResolution res{f.name, *text, revision, {}, ""};
    std::string why;
    if (auto snap = io::hub::cached_snapshot(ref, options.cache, &why)) {
      res.snapshot = *snap;
      res.note = fmt::format("{} {}@{} -> {} (Hugging Face cache)", f.name, *text, revision,
                             snap->string());
    } else if (mode == HubMode::Describe && options.offline) {
      res.note = fmt::format(
          "{} {}@{} is not in the Hugging Face cache ({}: {}) and HF_HUB_OFFLINE is set: a run "
          "fails; fetch it with `{}`",
          f.name, *text, revision, (options.cache / io::hub::repo_folder(ref)).string(), why,
          io::hub::fetch_command(ref));
    } else if (mode != HubMode::Fetch && !options.offline) {
      res.note = fmt::format(
          "{} {}@{} is not in the Hugging Face cache ({}); training downloads it from {}", f.name,
          *text, revision, (options.cache / io::hub::repo_folder(ref)).string(), options.endpoint);
    } else {
      try {
        res.snapshot = io::hub::snapshot(ref, options);
      } catch (const InputError& e) {
        throw InputError(
            fmt::format("{}: not a local path, and {}", where(loader, f.name), e.what()));
      }
      res.note = fmt::format("{} {}@{} -> {} (downloaded)", f.name, *text, revision,
                             res.snapshot.string());
    }
    if (!res.snapshot.empty() && mode != HubMode::Describe) {
      f.assign(config, Value(res.snapshot.string()));
      remember(res);
    }
    out.push_back(std::move(res));
  }
  return out;
}

}  // namespace trlx::config
