// capi/validate_kvcache.h -- checking and normalising flash_kvcache_args and flash_combine_args (see
// validate_kvcache.cpp).
#pragma once
#include <vector>

#include "../flash.h"
#include "../libflash/kvcache.h"

namespace flash {
// FLASH_OK and a filled *p, or a status with the thread's message set; nothing is written either way. *args
// must already be at this library's layout. Host-resident index arrays are read and checked element by element.
int32_t validate_kvcache(const flash_kvcache_args* args, KvcacheParams* p);
// As validate_kvcache; the parts' normalised descriptors go to *parts (p->parts points into it).
int32_t validate_combine(const flash_combine_args* args, CombineParams* p, std::vector<CombinePart>* parts);
}  // namespace flash
