//! VLLMService API types.
