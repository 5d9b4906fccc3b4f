from zoo.specs.hookspecs import hookimpl


@hookimpl
def zoo_register_components(register):  # type: ignore[no-untyped-def]
    pass
