"""The virtual NeuronCore definition: presets, the ISA and the cost model."""
