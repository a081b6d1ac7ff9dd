// Writes a small finished run for readers in other languages to check against:
//   recorder_sample_run RUNS_ROOT/NAME
// Records: one sample of every record kind, then a measurement naming a stored kernel source.
#include <capnp/message.h>

#include <cstdio>

#include "recorder/run.h"
#include "recorder/vinci.capnp.h"
#include "tests/recorder/record_samples.h"

int main(int argc, char** argv) {
  using namespace vinci;
  if (argc != 2) {
    std::fprintf(stderr, "usage: recorder_sample_run RUN_DIR\n");
    return 2;
  }
  ManifestInfo m;
  m.name = "sample";
  m.config_text = "[run]\nname = \"sample\"\n";
  m.seed = 7;
  m.world = RunWorld::kSim;
  m.environment = capture_base_environment();
  auto w = RunWriter::create(argv[1], m);
  if (!w.ok()) {
    std::fprintf(stderr, "%s\n", w.status().to_string().c_str());
    return 1;
  }
  auto kinds = record_kinds();
  for (size_t i = 0; i < kinds.size(); ++i) {
    capnp::MallocMessageBuilder msg;
    fill_sample_record(&msg, kinds[i], 7, i);
    VINCI_ASSERT((*w)->append(msg).ok());
  }
  auto src = (*w)->store().put("kernel-source", "extern \"C\" __global__ void k(float* y) { y[0] = 1.f; }");
  VINCI_ASSERT(src.ok());
  capnp::MallocMessageBuilder msg;
  auto rec = msg.initRoot<schema::Record>();
  rec.setTask("L1_019_relu");
  auto meas = rec.initMeasurement();
  meas.setEvaluator("sim");
  uint8_t bytes[16];
  src->to_bytes(bytes);
  meas.setPlan(capnp::Data::Reader(bytes, 16));
  meas.setSpeedup(2.5);
  VINCI_ASSERT((*w)->append(msg).ok());
  VINCI_ASSERT((*w)->finish().ok());
  std::printf("%s\n", argv[1]);
  return 0;
}
