// The CUDA device probe: on a machine without a GPU or driver it reports none, with a reason, and never throws;
// with a GPU it describes device 0. (The CUDA backend itself does not exist yet.)
#ifdef QUILL_HAVE_CUDA
#include "cuda/device.h"
#include "tests/test_util.h"

#include <catch2/catch.hpp>

TEST_CASE("the CUDA probe reports the device or why there is none", "[cuda]") {
    const quill::cuda::DeviceInfo info = quill::cuda::probe();  // a throw fails the test
    if (info.count == 0) {
        // No device is the machine, not missing test data: a skip under CI too. It must say why.
        if (info.reason.empty()) FAIL("the probe found no CUDA device and gave no reason");
        quill::test::skip_no_device("no CUDA device here (" + info.reason + "); the probe said so");
        return;
    }
    CHECK(info.reason.empty());
    CHECK(!info.name.empty());
    CHECK(info.total_memory > (size_t{1} << 30));
    CHECK(info.cc_major >= 5);
}
#endif
