"""Names vulture (tests/test_dead_code.py) reports as unused in src/ that are used where it
cannot see: click commands registered by their decorators, attributes read by name (ctx.params,
json's C scanner, yaml, Python's data model), entry points in pyproject.toml, module
__getattr__ hooks, and model fields kept for upstream's flags and config keys. Not Python to
run: vulture only reads the names. Add a name here only with the reason it is used."""
# ruff: noqa
# mypy: ignore-errors
# flake8: noqa

# click commands and groups, registered by their decorators or looked up by name (nct.cli.lazy)
list_command, transform_root_command, generate_command, check_command  # nct.cli.cdi
update_ldcache, enable_cuda_compat, noop, ctk_hook  # nct.cli.cdi_hook_click
command_class  # click.Group attribute
list_cmd  # nct.cli.container_cli
unconfigure  # nct.cli.engines
create_cmd, run_cmd, show_cmd  # nct.cli.sim
create_dev_char_symlinks  # nct.cli.system
_.format_commands  # click.MultiCommand hook (nct.cli.lazy)
compute, ngx, utility  # nvidia-container-cli configure flags, read through ctx.params
__getattr__  # module __getattr__ (PEP 562): nct.cli.cdi_hook, nct.cli.ctk

# entry points (pyproject.toml, packaging/toolkit/launcher.c)
main_cdi, main_legacy  # nct.runtime.main

# attributes read by name
object_hook, object_pairs_hook, parse_float, parse_int, parse_constant, memo  # json's C scanner (nct.jsonio)
_.ignore_aliases  # yaml Dumper hook (nct.cdi.spec)
_.__hash__  # Python's data model (nct.record)

# upstream's flags and config keys, accepted (and kept in the models) though nct does not act on them
config_search_paths, csv_ignore_patterns, csv_compat_container_root  # cdi generate options
environment, mount_spec_path, compat_container_root, csv  # config.toml keys (nct.config.model)

# facts parsed from /proc (nct.driver.procfs) and reports, read by tests and logs
open_module, video_bios, bus_type, firmware, modify  # nct.driver.procfs
skipped  # nct.nodeprep.devinit.InitReport
BPF_F_ALLOW_OVERRIDE  # attach flag, used by tests/container/test_review_attacks.py
