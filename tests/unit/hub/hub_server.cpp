// A local stand-in for the Hugging Face hub (loopback HTTP) that the download tests talk to.
#include "hub_server.hpp"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <stdexcept>

namespace trlx::test {

namespace fs = std::filesystem;

namespace {

std::string read_all(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

bool send_all(int fd, const std::string& s) {
  size_t off = 0;
  while (off < s.size()) {
    const ssize_t n = ::send(fd, s.data() + off, s.size() - off, MSG_NOSIGNAL);
    if (n <= 0) return false;
    off += static_cast<size_t>(n);
  }
  return true;
}

std::string lower(std::string s) {
  for (auto& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  std::string cur;
  for (char c : s) {
    if (c == sep) {
      out.push_back(cur);
      cur.clear();
    } else {
      cur += c;
    }
  }
  out.push_back(cur);
  return out;
}

std::string unescape(const std::string& s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '%' && i + 2 < s.size()) {
      out += static_cast<char>(std::stoi(s.substr(i + 1, 2), nullptr, 16));
      i += 2;
    } else {
      out += s[i];
    }
  }
  return out;
}

}  // namespace

HubServer::HubServer(const fs::path& cache_dir) {
  const auto expected = nlohmann::json::parse(read_all(cache_dir / "expected.json"));
  for (const auto& [repo_id, r] : expected.items()) {
    Repo repo;
    repo.type = r.at("type");
    repo.commit = r.at("commit");
    std::string folder = (repo.type == "model" ? "models--" : "datasets--") + repo_id;
    folder.replace(folder.find('/'), 1, "--");
    const fs::path snap = cache_dir / folder / "snapshots" / repo.commit;
    for (const auto& [rel, f] : r.at("files").items()) {
      File file;
      file.etag = f.at("etag");
      file.lfs = f.at("lfs");
      if (fs::exists(snap / rel)) {
        file.data = read_all(snap / rel);
        file.present = true;
        blobs_[file.etag] = file.data;
      }
      repo.files[rel] = file;
    }
    repos_[repo_id] = repo;
  }
  listen_fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
  int one = 1;
  ::setsockopt(listen_fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  if (::bind(listen_fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 ||
      ::listen(listen_fd_, 64) != 0)
    throw std::runtime_error("test hub server: cannot listen");
  socklen_t len = sizeof addr;
  ::getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&addr), &len);
  port_ = ntohs(addr.sin_port);
  thread_ = std::thread([this] { serve(); });
}

HubServer::~HubServer() {
  stop_ = true;
  ::shutdown(listen_fd_, SHUT_RDWR);
  ::close(listen_fd_);
  thread_.join();
  for (auto& w : workers_) w.join();
}

std::string HubServer::endpoint() const { return "http://127.0.0.1:" + std::to_string(port_); }

std::vector<HubServer::Request> HubServer::requests() const {
  std::lock_guard<std::mutex> g(mu_);
  return requests_;
}

size_t HubServer::count(const std::string& method, const std::string& path_prefix) const {
  size_t n = 0;
  for (const auto& r : requests())
    if (r.method == method && r.path.rfind(path_prefix, 0) == 0) ++n;
  return n;
}

void HubServer::serve() {
  while (!stop_) {
    pollfd p{listen_fd_, POLLIN, 0};
    if (::poll(&p, 1, 100) <= 0) continue;
    const int fd = ::accept(listen_fd_, nullptr, nullptr);
    if (fd < 0) continue;
    std::lock_guard<std::mutex> g(mu_);
    workers_.emplace_back([this, fd] {
      handle(fd);
      ::close(fd);
    });
  }
}

void HubServer::handle(int fd) {
  std::string in;
  char buf[4096];
  while (in.find("\r\n\r\n") == std::string::npos) {
    const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
    if (n <= 0) return;
    in.append(buf, static_cast<size_t>(n));
  }
  const auto lines = split(in.substr(0, in.find("\r\n\r\n")), '\n');
  const auto first = split(lines[0], ' ');
  Request req;
  req.method = first[0];
  req.path = unescape(first.size() > 1 ? first[1] : "/");
  for (size_t i = 1; i < lines.size(); ++i) {
    const auto colon = lines[i].find(':');
    if (colon == std::string::npos) continue;
    const std::string name = lower(lines[i].substr(0, colon));
    std::string value = lines[i].substr(colon + 1);
    while (!value.empty() && (value.front() == ' ')) value.erase(value.begin());
    while (!value.empty() && (value.back() == '\r' || value.back() == ' ')) value.pop_back();
    if (name == "range") req.range = value;
    if (name == "authorization") req.authorization = value;
  }
  {
    std::lock_guard<std::mutex> g(mu_);
    requests_.push_back(req);
  }
  const bool head = req.method == "HEAD";
  auto reply = [&](int code, const std::string& reason,
                   std::vector<std::pair<std::string, std::string>> headers,
                   const std::string& body) {
    std::string out = "HTTP/1.1 " + std::to_string(code) + " " + reason + "\r\n";
    bool has_length = false;
    for (const auto& [k, v] : headers) {
      out += k + ": " + v + "\r\n";
      has_length |= k == "Content-Length";
    }
    if (!has_length) out += "Content-Length: " + std::to_string(body.size()) + "\r\n";
    out += "Connection: close\r\n\r\n";
    if (!head) out += body;
    send_all(fd, out);
  };
  const auto parts =
      split(req.path.substr(1, req.path.find('?') == std::string::npos ? std::string::npos
                                                                       : req.path.find('?') - 1),
            '/');
  const bool authorized = required_token.empty() || req.authorization == "Bearer " + required_token;
  if (parts[0] == "cdn" && parts.size() == 2) {
    auto it = blobs_.find(parts[1]);
    if (it == blobs_.end()) return reply(404, "Not Found", {}, "");
    std::string data = it->second;
    if (corrupt && !data.empty())
      data[data.size() / 2] = static_cast<char>(data[data.size() / 2] ^ 0x5a);
    if (blob_delay_ms) std::this_thread::sleep_for(std::chrono::milliseconds(blob_delay_ms));
    size_t from = 0;
    if (req.range.rfind("bytes=", 0) == 0) from = std::stoull(req.range.substr(6));
    if (from > data.size()) return reply(416, "Range Not Satisfiable", {}, "");
    const std::string part = data.substr(from);
    std::vector<std::pair<std::string, std::string>> h;
    int code = 200;
    if (!req.range.empty()) {
      code = 206;
      h.emplace_back("Content-Range", "bytes " + std::to_string(from) + "-" +
                                          std::to_string(data.size() - 1) + "/" +
                                          std::to_string(data.size()));
    }
    bool cut = false;
    {
      std::lock_guard<std::mutex> g(mu_);
      if (cut_after && from == 0 && !head && !cut_done_[parts[1]] && part.size() > cut_after) {
        cut_done_[parts[1]] = true;
        cut = true;
      }
    }
    if (cut) {  // the headers promise everything, the connection ends early
      std::string out = "HTTP/1.1 200 OK\r\nContent-Length: " + std::to_string(part.size()) +
                        "\r\nConnection: close\r\n\r\n" + part.substr(0, cut_after);
      send_all(fd, out);
      return;
    }
    return reply(code, code == 206 ? "Partial Content" : "OK", h, part);
  }
  if (parts[0] == "api" && parts.size() >= 6 && parts[4] == "revision") {
    if (!authorized)
      return reply(401, "Unauthorized", {{"X-Error-Code", "RepoNotFound"}}, "{\"error\":\"401\"}");
    const std::string type = parts[1] == "models" ? "model" : "dataset";
    auto it = repos_.find(parts[2] + "/" + parts[3]);
    if (it == repos_.end() || it->second.type != type)
      return reply(404, "Not Found", {{"X-Error-Code", "RepoNotFound"}},
                   "{\"error\":\"Repository not found\"}");
    if (parts[5] != "main" && parts[5] != it->second.commit)
      return reply(404, "Not Found", {{"X-Error-Code", "RevisionNotFound"}},
                   "{\"error\":\"Invalid rev id\"}");
    nlohmann::json j;
    j["id"] = it->first;
    j["sha"] = it->second.commit;
    j["siblings"] = nlohmann::json::array();
    for (const auto& [rel, f] : it->second.files) j["siblings"].push_back({{"rfilename", rel}});
    return reply(200, "OK", {{"Content-Type", "application/json"}}, j.dump());
  }
  // /[datasets/]org/name/resolve/rev/file...
  size_t at = 0;
  std::string type = "model";
  if (parts[0] == "datasets") {
    type = "dataset";
    at = 1;
  }
  if (parts.size() < at + 5 || parts[at + 2] != "resolve") return reply(404, "Not Found", {}, "");
  if (!authorized) return reply(401, "Unauthorized", {{"X-Error-Code", "RepoNotFound"}}, "");
  auto it = repos_.find(parts[at] + "/" + parts[at + 1]);
  if (it == repos_.end() || it->second.type != type)
    return reply(404, "Not Found", {{"X-Error-Code", "RepoNotFound"}}, "");
  std::string rel;
  for (size_t i = at + 4; i < parts.size(); ++i) rel += (rel.empty() ? "" : "/") + parts[i];
  auto f = it->second.files.find(rel);
  if (f == it->second.files.end() || !f->second.present)
    return reply(404, "Not Found",
                 {{"X-Error-Code", "EntryNotFound"}, {"X-Repo-Commit", it->second.commit}}, "");
  const File& file = f->second;
  if (file.lfs)
    return reply(302, "Found",
                 {{"Location", "http://localhost:" + std::to_string(port_) + "/cdn/" + file.etag},
                  {"X-Repo-Commit", it->second.commit},
                  {"X-Linked-Etag", "\"" + file.etag + "\""},
                  {"X-Linked-Size", std::to_string(file.data.size())},
                  {"ETag", "\"0123456789abcdef0123456789abcdef01234567\""},
                  {"Content-Length", "0"}},
                 "");
  return reply(200, "OK", {{"X-Repo-Commit", it->second.commit}, {"ETag", "\"" + file.etag + "\""}},
               file.data);
}

}  // namespace trlx::test
