/* simlib.c: a stand-in driver library. Every catalogued library is this file compiled
 * with -DNCT_LIBNAME="libfoo.so" (and linked with the real SONAME), so loaders, ldconfig
 * and ELF checks see a genuine shared object. */
#ifndef NCT_LIBNAME
#define NCT_LIBNAME "unknown"
#endif
#ifndef NCT_DRIVER_VERSION
#define NCT_DRIVER_VERSION "0"
#endif

const char *nct_sim_library_name(void) { return NCT_LIBNAME; }
const char *nct_sim_driver_version(void) { return NCT_DRIVER_VERSION; }
