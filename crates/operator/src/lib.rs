//! The VLLMService controller.
