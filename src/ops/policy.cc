#include "src/ops/policy.h"

#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "simdattn/targets.h"
#include "src/common/check.h"

namespace simdattn {
namespace internal {
namespace {

// One rule of the table: where `applies`, the knob takes the value, for
// the reason given (bench/RESULTS.md, "Kept decisions", has the numbers).
struct Rule {
  const char* knob;
  bool (*applies)(const CpuDescription&);
  void (*set)(Policy&);
  const char* reason;
};

bool IsAmd(const CpuDescription& cpu) { return cpu.vendor == CpuVendor::kAmd; }

const Rule kRules[] = {
    {"pace_rows_from_memory = false",
     [](const CpuDescription& cpu) { return IsAmd(cpu) && cpu.family == 0x19; },
     [](Policy& p) { p.pace_rows_from_memory = false; },
     "AMD family 0x19 (Zen 3, Zen 4): the hardware prefetchers alone read "
     "bf16, f16 and q8_0 caches from memory 1.2-2.3x as fast as paced "
     "(Zen 4); Zen 5 and Intel keep the pacing (Zen 5: 1.05-1.4x faster "
     "paced)"},
    {"direct_e4m3 = true", IsAmd, [](Policy& p) { p.direct_e4m3 = true; },
     "AMD's cores take denormal operands at full speed (Zen 5 measured); "
     "Intel's take a microcode assist per such instruction"},
    {"bf16_decode_pairs = true", IsAmd,
     [](Policy& p) { p.bf16_decode_pairs = true; },
     "vdpbf16ps decode over bf16 rows paid on Zen 4 and 5; on Intel's Xeons "
     "vdpbf16ps ran below the float32 FMAs"},
    {"bf16_decode_pairs = true",
     [](const CpuDescription& cpu) { return cpu.arm_bf16; },
     [](Policy& p) { p.bf16_decode_pairs = true; },
     "Arm with BF16: BFDOT takes 8 products of bf16 rows an instruction "
     "where the float32 route widens them and takes 2 FMAs (counted, not "
     "yet timed on Arm hardware; checked under qemu)"},
    {"cached_decode_pair_rows = 1",
     [](const CpuDescription& cpu) { return IsAmd(cpu) && cpu.family == 0x1A; },
     [](Policy& p) { p.cached_decode_pair_rows = 1; },
     "Zen 5, K and V in the L3: float32 products of 2 and 4 rows took "
     "0.6 and 0.75 of the pairs' time (1x16x4096x128_kv8, 1x32x..., "
     "kvbf16_bf16dot, 1 thread); from memory the pairs' 4 rows ran 1.2x "
     "as fast as float32 (1x32x16384x128_kv8)"},
    {"fp8_decode_pairs = true",
     [](const CpuDescription& cpu) { return IsAmd(cpu) && cpu.family == 0x19; },
     [](Policy& p) { p.fp8_decode_pairs = true; },
     "vdpbf16ps decode over fp8 rows paid on Zen 4; on Zen 5 it took 2.7x "
     "the time of E4M3 read straight and 1.7x of E5M2's float32 walk "
     "(8x12x4096x64_kvfp8_bf16dot, _kvfp8e5m2_bf16dot, 1 thread)"},
    {"dot_product_pairs = true", IsAmd,
     [](Policy& p) { p.dot_product_pairs = true; },
     "kBFloat16 MatMul and prefill on vdpbf16ps paid on Zen 4 and 5; on a "
     "Sapphire Rapids Xeon it ran below the float32 FMA rate, and AMX is the "
     "native path there"},
};

std::atomic<const Policy*> override_policy{nullptr};

// The speed knobs by name: flags and sizes, sizes within [min, max].
const std::pair<const char*, bool Policy::*> kFlagKnobs[] = {
    {"pace_rows_from_memory", &Policy::pace_rows_from_memory},
    {"direct_e4m3", &Policy::direct_e4m3},
};
struct SizeKnob {
  const char* name;
  size_t Policy::*member;
  size_t min, max;
};
const SizeKnob kSizeKnobs[] = {
    {"from_memory_bytes", &Policy::from_memory_bytes, 0, SIZE_MAX},
    {"matmul_task_tiles", &Policy::matmul_task_tiles, 1, 64},
    {"matmul_panel_group", &Policy::matmul_panel_group, 0, 64},
};

// A loaded plan file and the policy it makes; kept for the process (a
// reference ActivePolicy returned stays valid).
struct LoadedPlans {
  std::string path;
  PlanFile file;
  Policy policy;
};
std::deque<LoadedPlans>& AllLoaded() {
  static std::deque<LoadedPlans> loaded;
  return loaded;
}
std::atomic<const LoadedPlans*> loaded_plans{nullptr};

// SIMDATTN_PLANS, loaded once at the first ActivePolicy: a file that does
// not load leaves the table, with the reason on stderr (a server's calls
// must not fail over a stale file).
bool LoadFromEnvironment() {
  const char* path = std::getenv("SIMDATTN_PLANS");
  if (path == nullptr || *path == '\0') return false;
  try {
    LoadPlanFile(path);
  } catch (const std::exception& e) {
    std::fprintf(stderr,
                 "simdattn: SIMDATTN_PLANS not loaded, the policy "
                 "table's choices kept: %s\n",
                 e.what());
    return false;
  }
  return true;
}

std::string Trimmed(const std::string& s) {
  const size_t first = s.find_first_not_of(" \t\r");
  if (first == std::string::npos) return "";
  return s.substr(first, s.find_last_not_of(" \t\r") - first + 1);
}

}  // namespace

std::vector<std::string> KnobNames() {
  std::vector<std::string> names;
  for (const auto& [name, member] : kFlagKnobs) names.push_back(name);
  for (const SizeKnob& knob : kSizeKnobs) names.push_back(knob.name);
  return names;
}

std::string KnobValue(const Policy& policy, const std::string& name) {
  for (const auto& [knob, member] : kFlagKnobs) {
    if (name == knob) return policy.*member ? "true" : "false";
  }
  for (const SizeKnob& knob : kSizeKnobs) {
    if (name == knob.name) return std::to_string(policy.*knob.member);
  }
  ThrowInvalidArgument("KnobValue", "no knob \"", name, "\"");
}

void SetKnob(const std::string& name, const std::string& value,
             Policy* policy) {
  for (const auto& [knob, member] : kFlagKnobs) {
    if (name != knob) continue;
    SIMDATTN_REQUIRE(value == "true" || value == "false", "SetKnob", name,
                     " takes true or false, not \"", value, "\"");
    policy->*member = value == "true";
    return;
  }
  for (const SizeKnob& knob : kSizeKnobs) {
    if (name != knob.name) continue;
    size_t parsed = 0, end = 0;
    try {
      parsed = std::stoull(value, &end);
    } catch (const std::exception&) {
      end = 0;
    }
    SIMDATTN_REQUIRE(end == value.size() && end != 0 && value[0] != '-' &&
                         parsed >= knob.min && parsed <= knob.max,
                     "SetKnob", name, " takes a whole number in [", knob.min,
                     ", ", knob.max, "], not \"", value, "\"");
    policy->*knob.member = parsed;
    return;
  }
  std::string names;
  for (const std::string& n : KnobNames()) names += " " + n;
  ThrowInvalidArgument("SetKnob", "no knob \"", name, "\" (knobs:", names, ")");
}

std::string PlanFile::Format() const {
  std::string text =
      "# simdattn plans, written by `simdattn tune`: load with "
      "SIMDATTN_PLANS=<this file>\n# or simdattn::LoadPlans. Each knob "
      "leaves results bit-identical; the rest\n# come from the policy "
      "table (src/ops/policy.cc).\nsimdattn " +
      version + "\ncpu " + cpu + "\n";
  for (const Knob& knob : knobs) {
    text += knob.name + " " + knob.value;
    if (!knob.evidence.empty()) text += "  # " + knob.evidence;
    text += "\n";
  }
  return text;
}

PlanFile PlanFile::Parse(const std::string& text, const std::string& source) {
  PlanFile file;
  std::istringstream lines(text);
  std::string line;
  Policy check;
  for (size_t number = 1; std::getline(lines, line); ++number) {
    const size_t hash = line.find('#');
    const std::string evidence =
        hash == std::string::npos ? "" : Trimmed(line.substr(hash + 1));
    const std::string body = Trimmed(line.substr(0, hash));
    if (body.empty()) continue;
    const size_t space = body.find_first_of(" \t");
    const std::string key = body.substr(0, space);
    const std::string value =
        space == std::string::npos ? "" : Trimmed(body.substr(space));
    const auto fail = [&](const std::string& why) {
      ThrowInvalidArgument("LoadPlans", source, ":", number, ": ", why,
                           " (line \"", line, "\")");
    };
    if (key == "simdattn" || key == "cpu") {
      std::string& field = key == "cpu" ? file.cpu : file.version;
      if (!field.empty() || value.empty()) fail("one " + key + " line wanted");
      field = value;
    } else if (file.version.empty() || file.cpu.empty()) {
      fail("the simdattn and cpu lines come before the knobs");
    } else {
      try {
        SetKnob(key, value, &check);
      } catch (const std::invalid_argument& e) {
        fail(e.what());
      }
      file.knobs.push_back({key, value, evidence});
    }
  }
  if (file.version.empty() || file.cpu.empty()) {
    ThrowInvalidArgument("LoadPlans", source,
                         ": not a plan file (no simdattn or cpu line)");
  }
  return file;
}

void LoadPlanFile(const std::string& path) {
  if (path.empty()) {
    loaded_plans.store(nullptr, std::memory_order_release);
    return;
  }
  std::ifstream in(path, std::ios::binary);
  SIMDATTN_REQUIRE(in.good(), "LoadPlans", "cannot read plan file \"", path,
                   "\"");
  std::ostringstream text;
  text << in.rdbuf();
  PlanFile file = PlanFile::Parse(text.str(), path);
  const std::string cpu = ThisCpu().Summary();
  SIMDATTN_REQUIRE(file.cpu == cpu && file.version == Version(), "LoadPlans",
                   path, " was tuned on \"", file.cpu, "\" by simdattn ",
                   file.version, "; this is \"", cpu, "\", simdattn ",
                   Version(), ": run `simdattn tune` here");
  Policy policy = PolicyFor(ThisCpu());
  for (const PlanFile::Knob& knob : file.knobs) {
    SetKnob(knob.name, knob.value, &policy);
  }
  AllLoaded().push_back({path, std::move(file), policy});
  loaded_plans.store(&AllLoaded().back(), std::memory_order_release);
}

std::string ActivePolicySource() {
  ActivePolicy();  // SIMDATTN_PLANS, once.
  if (override_policy.load(std::memory_order_acquire) != nullptr) {
    return "an override (PolicyOverride)";
  }
  const LoadedPlans* loaded = loaded_plans.load(std::memory_order_acquire);
  return loaded != nullptr ? "the table and plan file " + loaded->path
                           : "the table";
}

std::vector<std::string> ActiveRules() {
  ActivePolicy();  // SIMDATTN_PLANS, once.
  std::vector<std::string> rules;
  PolicyFor(ThisCpu(), &rules);
  if (const LoadedPlans* loaded =
          loaded_plans.load(std::memory_order_acquire)) {
    for (const PlanFile::Knob& knob : loaded->file.knobs) {
      rules.push_back(knob.name + " = " + knob.value + ": tuned (" +
                      loaded->path + ")" +
                      (knob.evidence.empty() ? "" : ", " + knob.evidence));
    }
  }
  return rules;
}

Policy PolicyFor(const CpuDescription& cpu, std::vector<std::string>* rules) {
  Policy policy;
  for (const Rule& rule : kRules) {
    if (!rule.applies(cpu)) continue;
    rule.set(policy);
    if (rules != nullptr) {
      rules->push_back(std::string(rule.knob) + ": " + rule.reason);
    }
  }
  return policy;
}

const Policy& ActivePolicy() {
  static const Policy table = PolicyFor(ThisCpu());
  static const bool from_environment = LoadFromEnvironment();
  (void)from_environment;
  if (const Policy* forced = override_policy.load(std::memory_order_acquire)) {
    return *forced;
  }
  const LoadedPlans* loaded = loaded_plans.load(std::memory_order_acquire);
  return loaded != nullptr ? loaded->policy : table;
}

PolicyOverride::PolicyOverride(const Policy& policy)
    : policy_(policy),
      previous_(override_policy.exchange(&policy_, std::memory_order_acq_rel)) {
}

PolicyOverride::~PolicyOverride() {
  override_policy.store(previous_, std::memory_order_release);
}

}  // namespace internal
}  // namespace simdattn
