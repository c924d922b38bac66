"""Whatever runs a model beside the actors: embedders, the embedding batcher, LLM clients."""
