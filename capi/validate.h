// capi/validate.h -- checking and normalising the caller's arguments (see validate.cpp; the KV-cache and combine
// structs: validate_kvcache.cpp).
#pragma once
#include <vector>

#include "../flash.h"
#include "../libflash/kvcache.h"
#include "../libflash/params.h"

namespace flash {
// FLASH_OK and a filled *p, or a status with the thread's message set. *args must already be at this
// library's layout (capi/api.cpp reads the caller's struct through capi/versioned.h first).
int32_t validate_fwd(const flash_fwd_args* args, FwdParams* p);
int32_t validate_bwd(const flash_bwd_args* args, BwdParams* p);
// As above for flash_kvcache_args; host-resident index arrays are read and checked element by element.
int32_t validate_kvcache(const flash_kvcache_args* args, KvcacheParams* p);
// As above for flash_combine_args; the parts' normalised descriptors go to *parts (p->parts points into it).
int32_t validate_combine(const flash_combine_args* args, CombineParams* p, std::vector<CombinePart>* parts);
}
