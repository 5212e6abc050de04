"""mbde's benchmarks (``mbde bench NAME``): command modules that reproduce the papers'
experiments and measure speed and accuracy, printing tables. The core (``mbde_core``)
never imports this package; ``mbde bench`` reaches it through the ``mbde.commands`` entry
point.
"""
