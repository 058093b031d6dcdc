// The dlopen loader of plug-ins (mhc_plugin.h): a plug-in's table wrapped as a Backend.
#include "mhc/impl/plugin.hpp"

#include <dlfcn.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstddef>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <vector>

#include "mhc/impl/cuda.hpp"
#include "mhc/plugin/mhc_plugin.h"

namespace mhc::impl {

namespace {

mhc_config to_c(const KernelConfig& k, std::size_t T) {
  mhc_config c{};
  c.n = k.n;
  c.d = k.d;
  c.iters = k.iters;
  c.hc_eps = k.hc_eps;
  c.norm_eps = k.norm_eps;
  // ABI 1 can say tf32 operands and bf16 streams, nothing else.
  if ((k.products != Format::fp32 && k.products != Format::tf32) ||
      (k.streams != Format::fp32 && k.streams != Format::bf16) || k.accumulation != Format::fp32 ||
      k.mixes != Format::fp32 || k.coefficients != Format::fp32 || k.intermediates != Format::fp32)
    throw NotCompiled(
        "the plug-in ABI (mhc_config's tf32 and bf16_streams) declares only tf32 projection "
        "operands and bf16 streams");
  c.tf32 = k.products == Format::tf32 ? 1 : 0;
  c.bf16_streams = k.streams == Format::bf16 ? 1 : 0;
  c.tokens = T;
  return c;
}

// Buffers as the plug-in wants them: device copies (inputs copied in, outputs copied in too, so
// that the poison reaches the device, and copied back after), or host copies fenced on both
// sides: each array ends against a page no access may touch (a write or read past the end kills
// the worker at once), and a canary fills the 64 bytes before it and the padding after it to
// whole 64 bytes (checked after the call: a write there fails the call, naming the array). Every
// host copy goes back after the call, the inputs too, so that a write into an input is still
// seen as one.
class Memory {
 public:
  explicit Memory(bool device) : device_(device) {}
  Memory(const Memory&) = delete;
  Memory& operator=(const Memory&) = delete;
  ~Memory() {
    for (auto& b : bufs_)
      if (device_)
        cuda_free(b.dev);
      else
        ::munmap(b.map, b.map_bytes);
  }
  const float* in(const float* host, std::size_t count) {
    return place(const_cast<float*>(host), count, false);
  }
  float* out(float* host, std::size_t count) { return place(host, count, true); }
  // After a call that returned 0; throws PluginError (prefixed by `who`) if it wrote outside.
  void finish(const std::string& who) {
    if (device_) {
      for (auto& b : bufs_)
        if (b.output) cuda_copy_to_host(b.host, b.dev, b.bytes);
      return;
    }
    int ins = 0, outs = 0;
    for (auto& b : bufs_) {
      const int k = b.output ? outs++ : ins++;
      const auto* front = static_cast<const unsigned char*>(b.map);
      const auto* data = static_cast<const unsigned char*>(b.dev);
      const bool before = !fenced(front, data), after = !fenced(data + b.bytes, front + b.body);
      if (before || after)
        throw PluginError(who + " wrote " + (before ? "before the start" : "past the end") +
                          " of its " + (b.output ? "output " : "input ") + std::to_string(k + 1) +
                          " (" + std::to_string(b.bytes / sizeof(float)) + " floats)");
      if (b.output || std::memcmp(b.host, b.dev, b.bytes) != 0) std::memcpy(b.host, b.dev, b.bytes);
    }
  }

 private:
  static constexpr unsigned char kCanary = 0xA5;
  static constexpr std::size_t kFence = 64;
  struct Buf {
    float* host;
    void* dev;  // the device copy, or the fenced host copy
    std::size_t bytes;
    bool output;
    void* map = nullptr;  // host: the mapping, its bytes before the last page, and in all
    std::size_t body = 0, map_bytes = 0;
  };
  static bool fenced(const unsigned char* p, const unsigned char* end) {
    for (; p < end; ++p)
      if (*p != kCanary) return false;
    return true;
  }
  float* place(float* host, std::size_t count, bool output) {
    const std::size_t bytes = count * sizeof(float);
    if (device_) {
      void* dev = cuda_alloc(bytes);
      bufs_.push_back({host, dev, bytes, output});
      cuda_copy_to_device(dev, host, bytes);
      return static_cast<float*>(dev);
    }
    const std::size_t page = std::size_t(::sysconf(_SC_PAGESIZE));
    const std::size_t padded = (bytes + kFence - 1) / kFence * kFence;
    const std::size_t body = (kFence + padded + page - 1) / page * page;
    void* map =
        ::mmap(nullptr, body + page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (map == MAP_FAILED) throw PluginError("cannot map " + std::to_string(bytes) + " bytes");
    auto* base = static_cast<unsigned char*>(map);
    if (::mprotect(base + body, page, PROT_NONE) != 0) {
      ::munmap(map, body + page);
      throw PluginError("cannot fence an array of " + std::to_string(bytes) + " bytes");
    }
    std::memset(base, kCanary, body);
    unsigned char* data = base + body - padded;  // 64-byte aligned, its padding before the fence
    if (bytes) std::memcpy(data, host, bytes);
    Buf b{host, data, bytes, output};
    b.map = map;
    b.body = body;
    b.map_bytes = body + page;
    bufs_.push_back(b);
    return reinterpret_cast<float*>(data);
  }
  bool device_;
  std::vector<Buf> bufs_;
};

// A plug-in opened in this process only when a kernel of it runs here: in a worker process, or
// in-process when it cannot be isolated. The harness itself reads the table in a child.
struct Loaded {
  std::string path, open_path;
  Backend backend;
  std::mutex mu;
  const mhc_plugin* loaded = nullptr;
  mhc_plugin copy{};  // the table, a version 1 one extended with no backward
  const mhc_plugin* table() {
    std::lock_guard<std::mutex> lock(mu);
    if (!loaded) {
      copy = open_table(path, open_path);
      loaded = &copy;
    }
    return loaded;
  }
  // dlopen, the entry point and the table's checks; throws PluginError naming what is wrong.
  static mhc_plugin open_table(const std::string& path, const std::string& open_path) {
    void* h = dlopen(open_path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!h) throw PluginError("cannot load plug-in " + path + ": " + dlerror());
    using Entry = const mhc_plugin* (*)();
    auto entry = reinterpret_cast<Entry>(dlsym(h, "mhc_plugin_v1"));
    if (!entry)
      throw PluginError(
          "plug-in " + path +
          " exports no mhc_plugin_v1 (see impl/plugin/include/mhc/plugin/mhc_plugin.h)");
    const mhc_plugin* t = entry();
    auto bad = [&](const std::string& why) { return PluginError("plug-in " + path + ": " + why); };
    if (!t) throw bad("mhc_plugin_v1 returned NULL");
    if (t->abi_version != 1 && t->abi_version != MHC_PLUGIN_ABI_VERSION)
      throw bad("ABI version " + std::to_string(t->abi_version) +
                ", this harness speaks versions 1 and " + std::to_string(MHC_PLUGIN_ABI_VERSION));
    if (t->memory != MHC_MEMORY_HOST && t->memory != MHC_MEMORY_DEVICE)
      throw bad("memory must be MHC_MEMORY_HOST or MHC_MEMORY_DEVICE");
    // A version 1 table ends before the backward entry points: read only what it has.
    mhc_plugin full{};
    std::memcpy(&full, t, t->abi_version == 1 ? offsetof(mhc_plugin, mixes_backward) : sizeof full);
    return full;  // the library is never closed: the functions live on
  }
};

void check(const std::string& who, int rc, const char* err) {
  if (rc != 0)
    throw PluginError(who + " returned " + std::to_string(rc) + ": " +
                      (err[0] ? std::string(err) : std::string("(no message)")));
}

template <class F>
void call(const Loaded& p, const mhc_plugin* t, const char* op, bool present, F&& body) {
  if (!present) throw NotCompiled("plug-in " + p.backend.name + " has no " + op + " entry point");
  char err[512] = {0};
  Memory mem(t->memory == MHC_MEMORY_DEVICE);
  const int rc = body(mem, err, sizeof err);
  err[sizeof err - 1] = 0;
  check("plug-in " + p.backend.name + " " + op, rc, err);
  mem.finish("plug-in " + p.backend.name + " " + op);
}

Backend wrap(Loaded& L) {
  Loaded* p = &L;
  Backend b;
  b.name = L.backend.name;
  b.description = L.backend.description;
  b.mixes = [p](const KernelConfig& k, std::size_t T, const float* x, const float* hc_fn,
                float* out) {
    const std::size_t nd = std::size_t(k.n) * std::size_t(k.d), M = std::size_t(k.mix());
    const mhc_plugin* t = p->table();
    call(*p, t, "mixes", t->mixes != nullptr, [&](Memory& m, char* err, std::size_t n) {
      const mhc_config c = to_c(k, T);
      return t->mixes(&c, m.in(x, T * nd), m.in(hc_fn, M * nd), m.out(out, T * M), err, n);
    });
  };
  b.split_sinkhorn = [p](const KernelConfig& k, std::size_t T, const float* mixes,
                         const float* scale, const float* base, float* pre, float* post,
                         float* comb) {
    const std::size_t n_ = std::size_t(k.n), M = std::size_t(k.mix());
    const mhc_plugin* t = p->table();
    call(*p, t, "split_sinkhorn", t->split_sinkhorn != nullptr,
         [&](Memory& m, char* err, std::size_t n) {
           const mhc_config c = to_c(k, T);
           return t->split_sinkhorn(&c, m.in(mixes, T * M), m.in(scale, 3), m.in(base, M),
                                    m.out(pre, T * n_), m.out(post, T * n_),
                                    m.out(comb, T * n_ * n_), err, n);
         });
  };
  b.hc_pre = [p](const KernelConfig& k, std::size_t T, const float* x, const float* pre_mix,
                 float* y) {
    const std::size_t n_ = std::size_t(k.n), d = std::size_t(k.d);
    const mhc_plugin* t = p->table();
    call(*p, t, "hc_pre", t->hc_pre != nullptr, [&](Memory& m, char* err, std::size_t n) {
      const mhc_config c = to_c(k, T);
      return t->hc_pre(&c, m.in(x, T * n_ * d), m.in(pre_mix, T * n_), m.out(y, T * d), err, n);
    });
  };
  b.hc_post = [p](const KernelConfig& k, std::size_t T, const float* f, const float* residual,
                  const float* post, const float* comb, float* y) {
    const std::size_t n_ = std::size_t(k.n), d = std::size_t(k.d);
    const mhc_plugin* t = p->table();
    call(*p, t, "hc_post", t->hc_post != nullptr, [&](Memory& m, char* err, std::size_t n) {
      const mhc_config c = to_c(k, T);
      return t->hc_post(&c, m.in(f, T * d), m.in(residual, T * n_ * d), m.in(post, T * n_),
                        m.in(comb, T * n_ * n_), m.out(y, T * n_ * d), err, n);
    });
  };
  b.rmsnorm = [p](const KernelConfig& k, std::size_t T, const float* x, const float* w, float* y) {
    const std::size_t d = std::size_t(k.d);
    const mhc_plugin* t = p->table();
    call(*p, t, "rmsnorm", t->rmsnorm != nullptr, [&](Memory& m, char* err, std::size_t n) {
      const mhc_config c = to_c(k, T);
      return t->rmsnorm(&c, m.in(x, T * d), m.in(w, d), m.out(y, T * d), err, n);
    });
  };
  b.boundary = [p](const KernelConfig& k, std::size_t T, const BoundaryIn& in,
                   const BoundaryOut& out) {
    const std::size_t n_ = std::size_t(k.n), d = std::size_t(k.d), M = std::size_t(k.mix());
    const mhc_plugin* t = p->table();
    call(*p, t, "boundary", t->boundary != nullptr, [&](Memory& m, char* err, std::size_t n) {
      const mhc_config c = to_c(k, T);
      const mhc_boundary_in ci{m.in(in.f, T * d),        m.in(in.residual, T * n_ * d),
                               m.in(in.post, T * n_),    m.in(in.comb, T * n_ * n_),
                               m.in(in.pre_mix, T * n_), m.in(in.hc_fn, M * n_ * d),
                               m.in(in.hc_scale, 3),     m.in(in.hc_base, M)};
      const mhc_boundary_out co{m.out(out.x, T * n_ * d), m.out(out.y, T * d),
                                m.out(out.mixes, T * M),  m.out(out.pre, T * n_),
                                m.out(out.post, T * n_),  m.out(out.comb, T * n_ * n_)};
      return t->boundary(&c, &ci, &co, err, n);
    });
  };
  Backend::Backward& g = b.backward;
  g.mixes = [p](const KernelConfig& k, std::size_t T, const float* x, const float* hc_fn,
                const float* gm, float* dx, float* dfn) {
    const std::size_t nd = std::size_t(k.n) * std::size_t(k.d), M = std::size_t(k.mix());
    const mhc_plugin* t = p->table();
    call(*p, t, "mixes_backward", t->mixes_backward != nullptr,
         [&](Memory& m, char* err, std::size_t n) {
           const mhc_config c = to_c(k, T);
           return t->mixes_backward(&c, m.in(x, T * nd), m.in(hc_fn, M * nd), m.in(gm, T * M),
                                    m.out(dx, T * nd), m.out(dfn, M * nd), err, n);
         });
  };
  g.split_sinkhorn = [p](const KernelConfig& k, std::size_t T, const float* mixes,
                         const float* scale, const float* base, const float* gp, const float* gq,
                         const float* gc, float* dm, float* ds, float* db) {
    const std::size_t n_ = std::size_t(k.n), M = std::size_t(k.mix());
    const mhc_plugin* t = p->table();
    call(*p, t, "split_sinkhorn_backward", t->split_sinkhorn_backward != nullptr,
         [&](Memory& m, char* err, std::size_t n) {
           const mhc_config c = to_c(k, T);
           return t->split_sinkhorn_backward(&c, m.in(mixes, T * M), m.in(scale, 3), m.in(base, M),
                                             m.in(gp, T * n_), m.in(gq, T * n_),
                                             m.in(gc, T * n_ * n_), m.out(dm, T * M), m.out(ds, 3),
                                             m.out(db, M), err, n);
         });
  };
  g.hc_pre = [p](const KernelConfig& k, std::size_t T, const float* x, const float* pre_mix,
                 const float* gy, float* dx, float* dp) {
    const std::size_t n_ = std::size_t(k.n), d = std::size_t(k.d);
    const mhc_plugin* t = p->table();
    call(*p, t, "hc_pre_backward", t->hc_pre_backward != nullptr,
         [&](Memory& m, char* err, std::size_t n) {
           const mhc_config c = to_c(k, T);
           return t->hc_pre_backward(&c, m.in(x, T * n_ * d), m.in(pre_mix, T * n_),
                                     m.in(gy, T * d), m.out(dx, T * n_ * d), m.out(dp, T * n_), err,
                                     n);
         });
  };
  g.hc_post = [p](const KernelConfig& k, std::size_t T, const float* f, const float* residual,
                  const float* post, const float* comb, const float* gy, float* df, float* dr,
                  float* dpost, float* dcomb) {
    const std::size_t n_ = std::size_t(k.n), d = std::size_t(k.d);
    const mhc_plugin* t = p->table();
    call(*p, t, "hc_post_backward", t->hc_post_backward != nullptr,
         [&](Memory& m, char* err, std::size_t n) {
           const mhc_config c = to_c(k, T);
           return t->hc_post_backward(&c, m.in(f, T * d), m.in(residual, T * n_ * d),
                                      m.in(post, T * n_), m.in(comb, T * n_ * n_),
                                      m.in(gy, T * n_ * d), m.out(df, T * d), m.out(dr, T * n_ * d),
                                      m.out(dpost, T * n_), m.out(dcomb, T * n_ * n_), err, n);
         });
  };
  g.rmsnorm = [p](const KernelConfig& k, std::size_t T, const float* x, const float* w,
                  const float* gy, float* dx, float* dw) {
    const std::size_t d = std::size_t(k.d);
    const mhc_plugin* t = p->table();
    call(*p, t, "rmsnorm_backward", t->rmsnorm_backward != nullptr,
         [&](Memory& m, char* err, std::size_t n) {
           const mhc_config c = to_c(k, T);
           return t->rmsnorm_backward(&c, m.in(x, T * d), m.in(w, d), m.in(gy, T * d),
                                      m.out(dx, T * d), m.out(dw, d), err, n);
         });
  };
  return b;
}

// What the harness needs of a table, read in a forked child: a plug-in that crashes, exits or
// hangs while it is opened ends that child only.
struct Table {
  bool device = false;
  std::string name, description;
};

Table read_table(const std::string& path, const std::string& open_path) {
  constexpr double limit_s = 10;  // opening a plug-in takes milliseconds (a CUDA one, a second)
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) throw PluginError("cannot read plug-in " + path + ": pipe");
  std::fflush(nullptr);
  const pid_t pid = ::fork();
  if (pid < 0) {
    ::close(fds[0]);
    ::close(fds[1]);
    throw PluginError("cannot read plug-in " + path + ": fork");
  }
  if (pid == 0) {
    ::close(fds[0]);
    std::string msg;
    try {
      const mhc_plugin table = Loaded::open_table(path, open_path);
      const mhc_plugin* t = &table;
      msg = std::string(t->memory == MHC_MEMORY_DEVICE ? "D" : "H") +
            std::string(t->name ? t->name : "?").substr(0, 200) + '\0' +
            std::string(t->description ? t->description : "").substr(0, 1000);
    } catch (const std::exception& e) {
      msg = std::string("E") + e.what();
    }
    for (std::size_t at = 0; at < msg.size();) {
      const ssize_t w = ::write(fds[1], msg.data() + at, msg.size() - at);
      if (w <= 0) break;
      at += std::size_t(w);
    }
    ::_exit(0);
  }
  ::close(fds[1]);
  std::string msg;
  bool timed_out = false;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(limit_s);
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) {
      timed_out = true;
      break;
    }
    pollfd p{fds[0], POLLIN, 0};
    const int ready = ::poll(&p, 1, int(left.count()));
    if (ready < 0 && errno == EINTR) continue;
    if (ready <= 0) continue;
    char buf[4096];
    const ssize_t got = ::read(fds[0], buf, sizeof buf);
    if (got <= 0) break;
    if (msg.size() < 8192) msg.append(buf, std::size_t(got));
  }
  ::close(fds[0]);
  if (timed_out) ::kill(pid, SIGKILL);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  const std::string reading = "plug-in " + path + " ";
  if (timed_out)
    throw PluginError(reading + "took longer than its time limit of 10 s while its table was " +
                      "read: killed");
  if (WIFSIGNALED(status))
    throw PluginError(reading + "died of " + signal_text(WTERMSIG(status)) +
                      " while its table was read");
  if (msg.empty())
    throw PluginError(reading + "ended its process (exit code " +
                      std::to_string(WEXITSTATUS(status)) + ") while its table was read");
  if (msg[0] == 'E') throw PluginError(msg.substr(1));
  Table t;
  t.device = msg[0] == 'D';
  const std::size_t nul = msg.find('\0');
  t.name = msg.substr(1, nul == std::string::npos ? std::string::npos : nul - 1);
  if (nul != std::string::npos) t.description = msg.substr(nul + 1);
  return t;
}

}  // namespace

std::string signal_text(int sig) {
  const char* name = sigabbrev_np(sig);
  return std::string("SIG") + (name ? name : std::to_string(sig).c_str()) + " (" + strsignal(sig) +
         ")";
}

const Backend& load_plugin(const std::string& path) {
  static std::mutex mu;
  static std::map<std::string, std::unique_ptr<Loaded>> loaded;
  std::lock_guard<std::mutex> lock(mu);
  if (auto it = loaded.find(path); it != loaded.end()) return it->second->backend;
  // A bare file name would make dlopen search the library path; the user means this file.
  const std::string open_path = path.find('/') == std::string::npos ? "./" + path : path;
  const Table t = read_table(path, open_path);
  if (t.device && cuda_device_count() == 0)
    throw PluginError("plug-in " + path +
                      ": it takes device memory and there is no CUDA device here");
  auto L = std::make_unique<Loaded>();
  L->path = path;
  L->open_path = open_path;
  L->backend = wrap(*L);
  L->backend.name = "plugin:" + path;
  // A table without a name: the file's, so a baseline still survives a move of the directory.
  const std::string stem = path.substr(path.find_last_of('/') + 1);
  L->backend.baseline_name = "plugin:" + (t.name.empty() || t.name == "?" ? stem : t.name);
  L->backend.description = t.name + ": " + t.description;
  L->backend.device = t.device;
  return (loaded[path] = std::move(L))->backend;
}

}  // namespace mhc::impl
