// mhc_verify._core: the judging lifecycle (runner/) for arrays held by Python. The package's
// Python side (mhc_verify/__init__.py) turns numpy arrays and torch tensors into C-contiguous
// float32 arrays; this side builds the case (runner::from_tensors), judges it with the GIL
// released, saves a failing case for its REPRO line, and returns the verdict as plain data.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <stdexcept>

#include "mhc/fixtures/fixture.hpp"
#include "mhc/oracles/error_model.hpp"
#include "mhc/oracles/ops.hpp"
#include "mhc/reports/text.hpp"
#include "mhc/runner/driver.hpp"
#include "mhc/runner/judge.hpp"
#include "mhc/runner/repro.hpp"
#include "mhc/runner/session.hpp"
#include "mhc/runner/tensors.hpp"

namespace py = pybind11;
using namespace mhc;

namespace {

// Judgements gathered into one report (the pytest plugin's --mhc-report): an entry per label (a
// test's node id), a case per judgement, written through the CLI's report writers as it goes.
class Recorder {
 public:
  explicit Recorder(const reports::Outputs& out) : writer_(out) {
    report_.meta = reports::make_meta(0, nullptr);
    writer_.write(report_, true);  // an unwritable path fails now
  }
  void add(const std::string& label, const oracles::OpCase& c, const runner::Outcome& o,
           const std::string& precision, const std::string& model, const std::string& repro) {
    reports::Entry& e = report_.entry(label);
    e.kind = "python";
    e.op = oracles::op_name(c.op);
    e.precision = precision;
    e.error_model = model;
    e.settings = {{"n", std::to_string(c.cfg.n)},
                  {"d", std::to_string(c.cfg.d)},
                  {"iters", std::to_string(c.cfg.iters)},
                  {"tokens", std::to_string(c.tokens)}};
    e.add_case(runner::record(o, e.cases.size(), 0, repro));
    writer_.write(report_);
  }
  void finish(int code) {
    report_.complete = true;
    report_.exit_code = code;
    writer_.write(report_, true);
  }

 private:
  reports::Report report_;
  reports::Writer writer_;
};

using Array = py::array_t<float, py::array::c_style | py::array::forcecast>;

// stored: the format (bf16, fp16) of arrays the caller gave in one, by name.
runner::NamedTensors named(const py::dict& d, const char* kind,
                           const std::map<std::string, std::string>& stored = {}) {
  runner::NamedTensors out;
  for (const auto& [key, value] : d) {
    const std::string name = py::str(key);
    if (!py::isinstance<py::array>(value))
      throw std::invalid_argument(std::string(kind) + "['" + name +
                                  "']: expected an array (numpy or torch)");
    const Array a = Array::ensure(value);
    if (!a) throw std::invalid_argument(std::string(kind) + "['" + name + "']: not a float array");
    runner::Named t;
    for (py::ssize_t i = 0; i < a.ndim(); ++i) t.shape.push_back(std::size_t(a.shape(i)));
    t.data.assign(a.data(), a.data() + a.size());
    if (const auto f = stored.find(name); f != stored.end())
      t.format = bnd::format_from_name(f->second);
    out[name] = std::move(t);
  }
  return out;
}

// The case's configuration from fixture attribute names; unknown keys are an error.
oracles::OpCase header(oracles::Op op, const py::dict& config, oracles::Precision precision) {
  ref::Config cfg = ref::v41();
  ref::BlockConfig block;
  for (const auto& [key, value] : config) {
    const std::string k = py::str(key);
    auto type_name = [&] { return std::string(py::str(py::type::of(value).attr("__name__"))); };
    // An integer (Python's or numpy's, not a bool) that fits an int; a TypeError or ValueError
    // naming the key, not pybind11's cast error.
    auto whole = [&] {
      if (PyBool_Check(value.ptr()))
        throw py::type_error("config['" + k + "']: expected an integer, got a bool");
      PyObject* index = PyNumber_Index(value.ptr());
      if (!index) {
        PyErr_Clear();
        throw py::type_error("config['" + k + "']: expected an integer, got " + type_name());
      }
      int overflow = 0;
      const long long v = PyLong_AsLongLongAndOverflow(index, &overflow);
      Py_DECREF(index);
      if (overflow || v < std::numeric_limits<int>::min() || v > std::numeric_limits<int>::max())
        throw std::invalid_argument("config['" + k + "']: " + std::string(py::str(value)) +
                                    " is out of range");
      return int(v);
    };
    auto real = [&] {  // a number (numpy's too), not a bool
      const double v = PyBool_Check(value.ptr()) ? -1.0 : PyFloat_AsDouble(value.ptr());
      if (PyBool_Check(value.ptr()) || (v == -1.0 && PyErr_Occurred())) {
        PyErr_Clear();
        throw py::type_error("config['" + k + "']: expected a number, got " + type_name());
      }
      return v;
    };
    if (k == "hc_mult" || k == "n")
      cfg.n = whole();
    else if (k == "dim" || k == "d")
      cfg.d = whole();
    else if (k == "sinkhorn_iters" || k == "iters")
      cfg.iters = whole();
    else if (k == "hc_eps")
      cfg.hc_eps = real();
    else if (k == "norm_eps")
      cfg.norm_eps = real();
    else if (k == "heads")
      block.heads = whole();
    else if (k == "head_dim")
      block.head_dim = whole();
    else if (k == "experts")
      block.experts = whole();
    else if (k == "top_k")
      block.top_k = whole();
    else if (k == "inter")
      block.inter = whole();
    else if (k == "route_scale")
      block.route_scale = real();
    else if (k == "layers")
      block.layers = whole();
    else if (k == "sublayers") {
      const std::string v = py::str(value);
      if (v != "reference" && v != "captured")
        throw std::invalid_argument("config['sublayers']: '" + v +
                                    "', expected 'reference' or 'captured'");
      block.captured_sublayers = v == "captured";
    } else
      throw std::invalid_argument("config['" + k +
                                  "']: unknown (expected hc_mult, dim, sinkhorn_iters, hc_eps, "
                                  "norm_eps; for block and stack heads, head_dim, experts, "
                                  "top_k, inter, route_scale, layers, sublayers)");
  }
  if (const auto why = ref::validate(cfg, block); !why.empty())
    throw std::invalid_argument("config: " + why);
  oracles::OpCase c = oracles::case_header(op, cfg, 1, 0, precision);
  c.block = block;
  return c;
}

// A stable name for a case: FNV-1a over its op and tensors, so that a test that fails again
// overwrites its own file.
// A saved file's name: everything it holds that the verdict depends on (configuration, precision,
// the outputs' stored formats, every tensor's shape and bits), so that no two cases share a file.
std::string case_key(const oracles::OpCase& c, const oracles::Trace<float>& got,
                     const bnd::StoredFormats& stored) {
  std::uint64_t h = 1469598103934665603ull;  // its own seed: the names files already have
  auto mix = [&](const void* p, std::size_t n) { h = runner::fnv1a(p, n, h); };
  auto mix_text = [&](const std::string& t) { mix(t.c_str(), t.size() + 1); };
  const ref::BlockConfig& b = c.block;
  char cfg[512];
  std::snprintf(cfg, sizeof cfg, "%d %d %d %a %a %s %d %d %d %d %d %a %d %s %d %zu %zu", c.cfg.n,
                c.cfg.d, c.cfg.iters, c.cfg.hc_eps, c.cfg.norm_eps, c.cfg.sem.name().c_str(),
                b.heads, b.head_dim, b.experts, b.top_k, b.inter, b.route_scale, b.layers,
                b.sem.name().c_str(), int(b.captured_sublayers), c.tokens, c.batch);
  mix_text(oracles::op_name(c.op));
  mix_text(cfg);
  mix_text(oracles::precision_name(c.precision));
  for (const auto& [name, f] : stored) {
    mix_text(name);
    mix_text(bnd::format_info(f).name);
  }
  auto tensor = [&](const std::string& name, const std::vector<std::size_t>& shape,
                    const std::vector<float>& data) {
    mix_text(name);
    mix(shape.data(), shape.size() * sizeof(std::size_t));
    mix(data.data(), data.size() * sizeof(float));
  };
  for (const auto* m : {&c.inputs, &c.params})
    for (const auto& [name, t] : *m) tensor(name, t.shape, t.data);
  for (const auto& s : got) tensor(s.name, s.shape, s.values);
  char buf[24];
  std::snprintf(buf, sizeof buf, "%012llx", static_cast<unsigned long long>(h & 0xffffffffffffull));
  return buf;
}

py::dict element(const oracles::Element& e) {
  py::dict d;
  d["index"] = e.index;
  d["token"] = e.token;
  d["got"] = e.got;
  d["want"] = e.want;
  d["bound"] = e.bound;
  d["ratio"] = e.ratio;
  d["rule"] = e.rule;
  return d;
}

struct Options {
  runner::Judging j;
  std::string save_dir, label;
  Recorder* recorder = nullptr;
};

// Text for Python: bytes that are not UTF-8 (a file's or a case's name) as Python's own file
// names hold them, surrogate-escaped, so that the name passed back selects the same case.
py::str text(const std::string& s) {
  PyObject* o = PyUnicode_DecodeUTF8(s.data(), Py_ssize_t(s.size()), "surrogateescape");
  if (!o) throw py::error_already_set();
  return py::reinterpret_steal<py::str>(o);
}

// Judges a case and returns the verdict as plain data (what mhc_verify.Judgement holds).
py::dict judged(const oracles::OpCase& c, const oracles::Trace<float>& got,
                const bnd::StoredFormats& stored, const std::vector<std::string>& zero_params,
                const Options& opt) {
  runner::Outcome o;
  {
    py::gil_scoped_release free;
    o = runner::judge_outputs(c, got, opt.j, stored);
  }
  const std::string op = oracles::op_name(c.op), precision = oracles::precision_name(c.precision),
                    model = oracles::error_model_name(opt.j.model);
  std::string saved, repro;
  if (c.origin == oracles::OpCase::Origin::file) {
    repro = runner::repro(c, "", opt.j.model);  // the case is already a file
  } else if (o.verdict.state == oracles::State::fail && !opt.save_dir.empty()) {
    saved = runner::save_case(opt.save_dir, "python_" + op + "_" + case_key(c, o.got, stored), c,
                              o.got, "mhc_verify.judge (Python)", stored);
    if (!saved.empty()) {
      oracles::OpCase file = c;
      file.origin = oracles::OpCase::Origin::file;
      file.file = saved;
      repro = runner::repro(file, "", opt.j.model);
    }
  }
  if (o.verdict.state != oracles::State::fail) repro.clear();
  if (opt.recorder) opt.recorder->add(opt.label, c, o, precision, model, repro);
  reports::Entry entry;
  entry.add_case(runner::record(o, 0, 0, repro));
  py::dict r;
  r["state"] = oracles::state_name(o.verdict.state);
  r["first_divergent"] = text(o.verdict.first_divergent);
  r["diagnosis"] = text(o.diagnosis);
  r["deviations"] = o.deviations;
  r["repro"] = text(repro);
  r["saved"] = text(saved);
  r["table"] = text(runner::stage_table(entry));
  r["op"] = op;
  r["tokens"] = c.tokens;
  r["precision"] = precision;
  r["error_model"] = model;
  r["zero_params"] = zero_params;
  r["name"] = text(c.file_case);
  py::list stages;
  for (const auto& s : o.verdict.stages) {
    py::dict d;
    d["stage"] = s.stage;
    d["state"] = oracles::state_name(s.state);
    d["rule"] = s.rule;
    d["reason"] = text(s.reason);
    d["elements"] = s.elements;
    d["failed"] = s.failed;
    d["undecidable"] = s.undecidable;
    d["ratio_max"] = s.ratio_max;
    d["ratio_p99"] = s.ratio_p99;
    d["ratio_median"] = s.ratio_p50;
    d["max_ulp"] = s.metrics.max_ulp;
    d["max_rel"] = s.metrics.max_rel;
    d["worst"] = element(s.worst);
    if (s.has_noise) {
      py::dict n;
      n["state"] = oracles::state_name(s.noise.state);
      n["reason"] = text(s.noise.reason);
      n["z_max"] = s.noise.z_max;
      n["z_rms"] = s.noise.z_rms;
      n["z_limit"] = s.noise.z_limit;
      n["rms_limit"] = s.noise.rms_limit;
      n["worst"] = element(s.noise.worst);
      d["noise"] = n;
    }
    stages.append(d);
  }
  r["stages"] = stages;
  return r;
}

Options options(const std::string& error_model, const std::string& save_dir, unsigned threads,
                bool diagnose, Recorder* recorder, const std::string& label) {
  Options o;
  o.j.model = oracles::error_model_from_name(error_model);
  o.j.threads = threads;
  o.j.diagnose = diagnose;
  o.save_dir = save_dir;
  o.recorder = recorder;
  o.label = label;
  return o;
}

runner::TensorCase tensor_case(const py::dict& k) {
  const auto get = [&](const char* key) -> py::object {
    return k.contains(key) ? py::object(k[key]) : py::object(py::dict());
  };
  // str or the bytes mhc_verify._text makes of one
  const std::string precision =
      k.contains("precision") ? k["precision"].cast<std::string>() : std::string("fp32");
  return runner::from_tensors(
      header(oracles::op_from_name(k["op"].cast<std::string>()), get("config"),
             oracles::precision_from_name(precision)),
      named(get("inputs"), "inputs"), named(get("params"), "params"),
      named(get("outputs"), "outputs",
            k.contains("stored") ? k["stored"].cast<std::map<std::string, std::string>>()
                                 : std::map<std::string, std::string>{}));
}

py::dict judge(const std::string& op_name, const py::dict& config, const py::dict& inputs,
               const py::dict& outputs, const py::dict& params, const std::string& precision,
               const std::string& error_model,
               const std::map<std::string, std::string>& stored_outputs,
               const std::string& save_dir, unsigned threads, bool diagnose, Recorder* recorder,
               const std::string& label) {
  const Options opt = options(error_model, save_dir, threads, diagnose, recorder, label);
  const runner::TensorCase tc = runner::from_tensors(
      header(oracles::op_from_name(op_name), config, oracles::precision_from_name(precision)),
      named(inputs, "inputs"), named(params, "params"), named(outputs, "outputs", stored_outputs));
  runner::within_limits(tc.c, opt.j.limits);
  return judged(tc.c, tc.outputs, tc.stored, tc.zero_params, opt);
}

// Every case of a fixture or capture file (only those named in `cases`, when given).
py::list judge_file(const std::string& path, const std::vector<std::string>& cases,
                    const std::string& error_model, unsigned threads, bool diagnose,
                    Recorder* recorder, const std::string& label) {
  const Options base = options(error_model, "", threads, diagnose, recorder, label);
  py::list out;
  try {
    fixtures::read_fixtures(
        path,
        [&](fixtures::Fixture&& fx) {  // one case held at a time
          if (!cases.empty() && !std::count(cases.begin(), cases.end(), fx.name)) return;
          if (!oracles::judges_something(fx.c, fx.outputs))  // as compare refuses it
            throw std::invalid_argument(
                path + (fx.name.empty() ? "" : " --case " + fx.name) + ": no outputs to judge" +
                (fx.outputs.empty() ? "" : " besides the sublayers' given ones"));
          runner::within_limits(fx.c, base.j.limits);
          Options opt = base;
          if (!fx.name.empty()) opt.label = label + "[" + fx.name + "]";
          out.append(judged(fx.c, fx.outputs, fx.stored, {}, opt));
        },
        60, cases);
  } catch (const fixtures::FixtureError& e) {
    throw std::invalid_argument(e.what());
  }
  return out;
}

// Writes many cases (dicts of op, config, inputs, params, outputs, precision, stored) as one
// mhc-capture file, each checked as judge() checks its arrays.
void write_capture(const std::string& path, const std::vector<std::string>& names,
                   const py::list& cases, const std::string& producer) {
  std::vector<fixtures::CaptureCase> out;
  for (std::size_t i = 0; i < names.size(); ++i) {
    runner::TensorCase tc;
    try {
      tc = tensor_case(cases[i].cast<py::dict>());
    } catch (const std::invalid_argument& e) {
      throw std::invalid_argument("case '" + names[i] + "': " + e.what());
    }
    out.push_back({names[i], std::move(tc.c), std::move(tc.outputs), "", std::move(tc.stored)});
  }
  try {
    fixtures::write_capture(path, out, producer);
  } catch (const fixtures::FixtureError& e) {
    throw std::invalid_argument(e.what());
  }
}

}  // namespace

PYBIND11_MODULE(_core, m) {
  m.doc() = "mhc-verify's judging lifecycle for arrays (use the mhc_verify package)";
  // A judgement allocates and frees megabytes; with glibc's defaults faulting them in again was
  // two thirds of a small judgement's time (bench/README.md, "The Python API in process").
  runner::keep_freed_memory();
  py::register_exception_translator([](std::exception_ptr p) {
    // A message naming a file or case whose bytes are not UTF-8 (Python had made it empty).
    const auto raise = [](PyObject* type, const char* what) {
      PyErr_SetString(type, reports::clean_text(what, true, "\n\t").c_str());
    };
    try {
      if (p) std::rethrow_exception(p);
    } catch (const runner::TooLarge& e) {
      raise(PyExc_ValueError, e.what());
    } catch (const std::invalid_argument& e) {
      raise(PyExc_ValueError, e.what());
    } catch (const py::builtin_exception& e) {  // TypeError and the like, as raised
      e.set_error();
    } catch (const std::runtime_error& e) {  // a report path that cannot be written
      raise(PyExc_OSError, e.what());
    }
  });
  m.def("judge_file", &judge_file, py::arg("path"), py::arg("cases"), py::arg("error_model"),
        py::arg("threads"), py::arg("diagnose"), py::arg("recorder").none(true), py::arg("label"));
  m.def("write_capture", &write_capture, py::arg("path"), py::arg("names"), py::arg("cases"),
        py::arg("producer"));
  m.def("judge", &judge, py::arg("op"), py::arg("config"), py::arg("inputs"), py::arg("outputs"),
        py::arg("params"), py::arg("precision"), py::arg("error_model"), py::arg("stored_outputs"),
        py::arg("save_dir"), py::arg("threads"), py::arg("diagnose"),
        py::arg("recorder").none(true), py::arg("label"));
  py::class_<Recorder>(m, "Recorder")
      .def(py::init([](const std::string& json, const std::string& md, const std::string& html,
                       const std::string& junit) {
             return std::make_unique<Recorder>(reports::Outputs{json, md, html, junit, {}, {}});
           }),
           py::arg("json"), py::arg("md"), py::arg("html"), py::arg("junit"))
      .def("finish", &Recorder::finish);
  m.def("within_limits",
        [](const std::string& op_name, const py::dict& config, double tokens, double batch) {
          const oracles::OpCase c =
              header(oracles::op_from_name(op_name), config, oracles::Precision::fp32());
          runner::within_limits(c.op, c.cfg, c.block, tokens, batch, runner::Limits{});
        });
  m.def("ops", [] {
    std::vector<std::string> v;
    for (const auto& s : oracles::op_table()) v.push_back(s.name);
    return v;
  });
  m.def(
      "layout",
      [](const std::string& op_name, const py::dict& config, const std::string& precision) {
        const oracles::OpCase c =
            header(oracles::op_from_name(op_name), config, oracles::precision_from_name(precision));
        const oracles::CaseLayout l = oracles::case_layout(c);
        auto list = [](const std::vector<oracles::NamedShape>& v) {
          py::dict d;
          for (const auto& s : v) d[py::str(s.name)] = py::tuple(py::cast(s.trailing));
          return d;
        };
        py::dict d;
        d["inputs"] = list(l.inputs);
        d["params"] = list(l.params);
        d["outputs"] = list(l.outputs);
        d["leading"] = l.leading;
        return d;
      },
      py::arg("op"), py::arg("config"), py::arg("precision") = "fp32");
}
