#pragma once
// /metrics text parsed for tests: every sample line checked against the
// exposition format, values keyed by "name{labels}" with the model_name
// label (on every series) taken out, so tests name series as they think of them.
#include <map>
#include <regex>
#include <sstream>
#include <string>

namespace kestrel::test {

struct PrometheusText {
  std::map<std::string, double> values;  // "kestrel_requests_total{outcome=\"length\"}" -> 2
  int samples = 0, bad_lines = 0, without_model_name = 0;
  std::string model_name;                // the label's value (the last seen)
  double get(const std::string& series) const {
    auto it = values.find(series);
    return it == values.end() ? -1 : it->second;
  }
};

inline PrometheusText parse_prometheus(const std::string& body) {
  static const std::regex sample(R"(^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(.*)\})? (-?[0-9.e+-]+|\+Inf|NaN)$)");
  static const std::regex label(R"re(([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)")re");
  PrometheusText out;
  std::istringstream in(body);
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line.rfind("# HELP ", 0) == 0 || line.rfind("# TYPE ", 0) == 0) continue;
    std::smatch m;
    if (!std::regex_match(line, m, sample)) {
      out.bad_lines++;
      continue;
    }
    std::string own;
    bool has_model = false;
    const std::string labels = m[3].str();
    for (auto it = std::sregex_iterator(labels.begin(), labels.end(), label); it != std::sregex_iterator(); ++it) {
      if ((*it)[1] == "model_name") {
        has_model = true;
        out.model_name = (*it)[2];
        continue;
      }
      own += (own.empty() ? "" : ",") + (*it)[0].str();
    }
    out.without_model_name += !has_model;
    out.values[m[1].str() + (own.empty() ? "" : "{" + own + "}")] = std::stod(m[4]);
    out.samples++;
  }
  return out;
}

}  // namespace kestrel::test
