// Sample records for recorder tests: every union member of schema::Record, with every field set
// to a value drawn from a keyed stream. Filled through Cap'n Proto's dynamic API, so a field added
// to the schema is covered without touching the tests.
#ifndef VINCI_TESTS_RECORDER_RECORD_SAMPLES_H_
#define VINCI_TESTS_RECORDER_RECORD_SAMPLES_H_

#include <capnp/message.h>

#include <cstdint>
#include <string>
#include <vector>

namespace vinci {

// Names of Record's union members, in schema order.
std::vector<std::string> record_kinds();

// Fills message's root Record as the given union member, every field set, from (seed, index).
void fill_sample_record(capnp::MallocMessageBuilder* message, const std::string& kind, uint64_t seed, uint64_t index);

// Encoded sample record number i of a deterministic sequence cycling through every kind, with
// its seq set to i.
std::string sample_payload(uint64_t seed, uint64_t i);

}  // namespace vinci

#endif  // VINCI_TESTS_RECORDER_RECORD_SAMPLES_H_
