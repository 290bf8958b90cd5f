// cli/src/main.cpp -- fa-bench: benchmarks libflash (through flash.h only) and gates CI on the results.
//
//   fa-bench [run] [flags]                       measure (the default command; `fa-bench run --help`)
//   fa-bench compare BASE.json NEW.json [--max-regression PCT]
//   fa-bench devices                             devices and the algorithms on each
//   fa-bench report FILES_OR_DIRS [--html OUT.html] [--markdown[=OUT.md]] [--baseline BASE.json] [--peers PEERS.json]
//
// Exit status: 0 success; 1 a regression (compare, report) or a failed --check (run); 2 bad usage or an
// unreadable file.
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iostream>
#include <string>

#include <cxxopts.hpp>

#include "bench.hpp"
#include "compare.hpp"
#include "device.hpp"
#include "report.hpp"
#include "results.hpp"

namespace fabench {
namespace {

const char* kUsage =
    "usage: fa-bench [run] [flags]            measure libflash (see fa-bench run --help)\n"
    "       fa-bench compare BASE.json NEW.json [--max-regression PCT]\n"
    "       fa-bench devices\n"
    "       fa-bench report FILES_OR_DIRS [--html OUT.html] [--markdown[=OUT.md]] [--baseline BASE.json]\n"
    "                       [--peers PEERS.json] [--max-regression PCT]\n";

int cmd_run(int argc, const char* const* argv) {
  for (int i = 1; i < argc; ++i)
    if (!std::strcmp(argv[i], "--help") || !std::strcmp(argv[i], "-h")) {
      std::cout << run_help();
      return 0;
    }
  RunConfig cfg = parse_run_args(argc, argv);
  resolve_defaults(&cfg);
  if (cfg.device_type == FLASH_DEVICE_CUDA && !built_with_cuda())
    throw std::invalid_argument("--device " + device_string(cfg.device_type, cfg.device_id) +
                                ": this fa-bench was built without the CUDA runtime");
  const nlohmann::json doc = run_benchmark(cfg);
  print_table(doc, std::cout);
  if (!cfg.json_path.empty()) {
    write_json(doc, cfg.json_path);
    std::cerr << "wrote " << cfg.json_path << "\n";
  }
  if (!cfg.csv_path.empty()) {
    std::ofstream out(cfg.csv_path);
    if (!out) throw std::runtime_error("cannot write " + cfg.csv_path);
    write_csv(doc, out);
    std::cerr << "wrote " << cfg.csv_path << "\n";
  }
  int failed = 0;
  for (const auto& r : doc["results"])
    if (r["check_passed"].is_boolean() && !r["check_passed"].get<bool>()) ++failed;
  if (failed) {
    std::cerr << "fa-bench: " << failed << " row(s) failed --check\n";
    return 1;
  }
  return 0;
}

int cmd_compare(int argc, const char* const* argv) {
  cxxopts::Options o("fa-bench compare", "Compare two result files; exit 1 when a row regressed past the threshold.");
  o.add_options()("max-regression", "allowed slowdown of the median time, percent",
                  cxxopts::value<double>()->default_value("5"))
                 ("markdown", "print a markdown table instead")("files", "", cxxopts::value<std::vector<std::string>>())
                 ("h,help", "this help");
  o.parse_positional({"files"});
  o.positional_help("BASE.json NEW.json");
  const auto r = o.parse(argc, argv);
  if (r.count("help")) {
    std::cout << o.help();
    return 0;
  }
  if (!r.count("files") || r["files"].as<std::vector<std::string>>().size() != 2)
    throw std::invalid_argument("compare needs two files: BASE.json NEW.json");
  const auto files = r["files"].as<std::vector<std::string>>();
  const nlohmann::json base = load_document(files[0]), fresh = load_document(files[1]);
  const CompareResult c = compare_documents(base, fresh, r["max-regression"].as<double>());
  if (r.count("markdown")) print_compare_markdown(c, std::cout);
  else print_compare(c, std::cout);
  return c.regressions > 0 ? 1 : 0;
}

void print_device(int32_t type, int32_t id) {
  flash_device_info info;
  flash_device_info_init(&info);
  if (flash_get_device_info(type, id, &info) != FLASH_OK) {
    std::cout << device_string(type, id) << ": " << flash_last_error_message() << "\n";
    return;
  }
  std::cout << device_string(type, id) << "  " << info.name << "\n";
  if (type == FLASH_DEVICE_CUDA)
    std::cout << "  compute capability " << info.cc_major << "." << info.cc_minor << ", " << info.multiprocessors
              << " SMs, SM clock " << info.clock_khz / 1000 << " MHz, memory clock " << info.memory_clock_khz / 1000
              << " MHz, " << info.memory_bus_width_bits << "-bit bus\n";
  else
    std::cout << "  " << info.multiprocessors << " hardware threads\n";
  std::cout << "  shared memory per " << (type == FLASH_DEVICE_CUDA ? "SM" : "core (L2)") << " " << info.shared_mem_per_sm / 1024
            << " KiB, " << (type == FLASH_DEVICE_CUDA ? "L2 " : "last-level cache ") << info.l2_cache_bytes / 1024 / 1024.0
            << " MiB, memory " << info.total_memory_bytes / 1e9 << " GB\n";
  std::cout << "  algorithms:";
  for (const std::string& n : algorithm_names(info.algorithms)) std::cout << " " << n;
  std::cout << "\n";
}

int cmd_devices() {
  std::cout << "libflash " << flash_version_string() << " (" << flash_build_info() << ")\n";
  std::cout << "compiled algorithms:";
  for (const std::string& n : algorithm_names(flash_compiled_algorithms())) std::cout << " " << n;
  std::cout << "\nfa-bench CUDA runtime: " << (built_with_cuda() ? "yes" : "no (CPU only)") << "\n\n";
  print_device(FLASH_DEVICE_CPU, 0);
  int32_t n = 0;
  if (flash_device_count(FLASH_DEVICE_CUDA, &n) != FLASH_OK) n = 0;
  if (n == 0) std::cout << "no CUDA device\n";
  for (int32_t i = 0; i < n; ++i) print_device(FLASH_DEVICE_CUDA, i);
  return 0;
}

}  // namespace
}  // namespace fabench

int main(int argc, char** argv) {
  using namespace fabench;
  try {
    const std::string cmd = argc > 1 ? argv[1] : "";
    if (cmd == "--help" || cmd == "-h" || cmd == "help") {
      std::cout << kUsage;
      return 0;
    }
    if (cmd == "compare") return cmd_compare(argc - 1, argv + 1);
    if (cmd == "devices") return cmd_devices();
    if (cmd == "report") return cmd_report(argc - 1, argv + 1);
    return cmd_run(argc, argv);
  } catch (const std::invalid_argument& e) {
    std::cerr << "fa-bench: " << e.what() << "\n" << kUsage;
    return 2;
  } catch (const cxxopts::exceptions::exception& e) {
    std::cerr << "fa-bench: " << e.what() << "\n" << kUsage;
    return 2;
  } catch (const std::exception& e) {
    std::cerr << "fa-bench: " << e.what() << "\n";
    return 2;
  }
}
