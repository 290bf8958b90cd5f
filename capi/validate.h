// capi/validate.h -- checking and normalising the caller's arguments (see validate.cpp).
#pragma once
#include "../flash.h"
#include "../libflash/params.h"

namespace flash {
// FLASH_OK and a filled *p, or a status with the thread's message set. *args must already be at this
// library's layout (capi/api.cpp reads the caller's struct through capi/versioned.h first).
int32_t validate_fwd(const flash_fwd_args* args, FwdParams* p);
int32_t validate_bwd(const flash_bwd_args* args, BwdParams* p);
}
