// What differs between the two compilations of a launch layer (.cu): the exported name, whether
// 16-byte vector loads require aligned bases, and which status a failed launch maps to.
#pragma once

#if defined(RSSM_EMULATION)
#define RSSM_ENTRY(name) rssm_emu_##name
#define RSSM_VECTOR_ALIGNED false
#define RSSM_LAUNCH_FAILED RSSM_ERR_EMULATOR
#else
#define RSSM_ENTRY(name) rssm_##name
#define RSSM_VECTOR_ALIGNED true
#define RSSM_LAUNCH_FAILED RSSM_ERR_LAUNCH
#endif
